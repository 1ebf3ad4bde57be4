"""agent_data: GRPO whose rollouts steer exploration, and whose train set grows with what the
explorer found (CoEvolve, papers/coevolve-agent-data-mutual-evolution.md).

Stages, after the shared start (experts, model, sft-target, eval-0): the GRPO steps run in
intervals `grpo-<i>` (their rollouts stored per step, as the `grpo` method stores them) that
end every `agent_data.synthesis_every` and every `grpo.eval_every` steps. After an interval
that ends a round, stage `evolve-<i>`:
1. signals: forgetting, boundary and rare over the round's steps (history: all steps before);
2. reflection: the explorer reads the chosen signals' trajectories, writes a context
   (`agent_data.explorer.kind` llm; the random and guided explorers of `walk` plan instead);
3. exploration: goal-free episodes under those contexts, stored (stage `evolve-<i>`);
4. synthesis: the env turns each exploration into candidate tasks;
5. verification: the env confirms them; the verified ones are stored with their provenance
   and join the train set, mixed into every later batch at `agent_data.mixture`.
The round's counts are the stage's EvolveRecord: signals by kind, explorations, candidates,
verified, rejected by reason, the explorer's kind and the synthesized tasks' share of the
batches (`coevo compare` and `coevo report` show them).
After an interval that ends at an evaluation step, `eval-<i>` as in `grpo`. Every stage
resumes after a kill: GRPO from its checkpoints, an evolve stage from its stored explorations.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from coevo.envs.base import SPLITS, Env
from coevo.envs.evolve import action_pattern, require
from coevo.envs.pool import EnvPool
from coevo.methods.agent_data.explore import (
    Seed,
    explore_env,
    pick,
    random_seeds,
    reflect,
    reflection_prompt,
)
from coevo.methods.agent_data.signals import KINDS, Found, Signal, rare_can_fire, step_signals
from coevo.methods.agent_data.summary import batch_share, describe_round
from coevo.methods.agent_data.synthesize import synthesize
from coevo.methods.agent_data.verify import verify
from coevo.methods.agent_data.walk import ending_patterns, plan_round, rarity, walks
from coevo.methods.grpo import grpo_stage, interval_ends
from coevo.policy.base import Policy
from coevo.run.console import console
from coevo.run.context import VALID, Run, StageModel
from coevo.run.records import EvolveRecord
from coevo.seeds import derive
from coevo.stages import play
from coevo.stages.shared import shared_start
from coevo.store import StoredTrajectory
from coevo.train.groups import TaskOrder
from coevo.trajectory import Task, Trajectory


def run_agent_data(run: Run) -> None:
    cfg = run.config
    every, steps = cfg.agent_data.synthesis_every, cfg.grpo.steps
    start = shared_start(run)
    train = run.tasks("train")
    with _env(run) as env:
        # Before any training: an env that cannot synthesize (or walk) says so now.
        require(env, walk=cfg.agent_data.explorer.kind != "llm")
    n = cfg.grpo.tasks_per_step * cfg.grpo.samples
    if "rare" in cfg.agent_data.signals and not rare_can_fire(n, cfg.agent_data.theta):
        console.print(
            f"[yellow]agent_data: no rare signal can fire: a step has {n} trajectories "
            f"(grpo.tasks_per_step x grpo.samples), and one of them is {100 / n:.2g}%, not under "
            f"agent_data.theta = {cfg.agent_data.theta}%. Raise one of them.[/]"
        )
    ends = interval_ends(run, cfg.grpo.eval_every, every)
    first = round_start = 0
    for i, until in enumerate(ends, start=1):
        synthesized = [s.task for s in run.store.synthesized()]
        share = cfg.agent_data.mixture
        model = grpo_stage(
            run,
            start.target,
            train + synthesized,
            i,
            first,
            until,
            step_tasks=mixture(train, synthesized, cfg.grpo.tasks_per_step, share, cfg.seed),
            more_inputs={"synthesized_tasks": len(synthesized)},
        )
        if until % every == 0 and until < steps:
            evolve_stage(run, model, i, list(range(round_start + 1, until + 1)), train)
            round_start = until
        if until % cfg.grpo.eval_every == 0 or until == steps:
            play.evaluate(run, model, i)
        first = until


@contextmanager
def _env(run: Run) -> Iterator[Env]:
    """An env in this process (synthesis and verification read the env's own state, which an
    env in a Ray worker keeps out of reach): one of the run's pool when the pool is local."""
    if not isinstance(run.pool, EnvPool):
        env = run.pool.factory()
        try:
            yield env
        finally:
            env.close()
        return
    env = run.pool.acquire()
    try:
        yield env
    finally:
        run.pool.release(env)


def mixture(
    base: Sequence[Task], synthesized: Sequence[Task], per_step: int, share: float, seed: int
) -> Callable[[int], list[Task]] | None:
    """Each step's tasks: `round(share * per_step)` synthesized ones (as many as there are)
    and the rest from the original train set, each a seeded pass of its own. None (the plain
    passes over the train set) while nothing is synthesized."""
    n_syn = min(len(synthesized), round(share * per_step))
    if n_syn == 0:
        return None
    base_order = TaskOrder(len(base), per_step - n_syn, seed)
    syn_order = TaskOrder(len(synthesized), n_syn, derive(seed, "synthesized"))

    def pick_tasks(step: int) -> list[Task]:
        return [base[i] for i in base_order.step(step)] + [
            synthesized[i] for i in syn_order.step(step)
        ]

    return pick_tasks


def held_out(env: Env, run: Run) -> list[Task]:
    """Every task a synthesized one must not be: the env's whole test splits (not only the
    evaluated slice) and the validation tasks."""
    tests = [t for split in SPLITS if split != "train" for t in env.tasks(split)]
    return tests + run.tasks(VALID) if run.config.env.valid_tasks else tests


def played_steps(run: Run, until: int) -> dict[int, list[StoredTrajectory]]:
    """The stored GRPO rollouts of steps 1 ... until, by step."""
    out: dict[int, list[StoredTrajectory]] = {}
    for stage in run.store.stages():
        if stage.startswith("grpo-"):
            for row in run.store.stored_trajectories(stage=stage):
                if row.iteration <= until:
                    out.setdefault(row.iteration, []).append(row)
    return dict(sorted(out.items()))


def explorer(run: Run, model: StageModel) -> Policy:
    """The explorer: the recipe's other model or server, else the current agent."""
    ex = run.config.agent_data.explorer
    if ex.server.url is not None:
        return play.open_policy(ex.path or model.path, name="explorer", server=ex.server)
    if ex.path is not None or ex.name is not None:
        from coevo.policy.models import get_model

        cfg = run.config.model
        return play.open_policy(
            ex.path or get_model(str(ex.name)),
            name="explorer",
            dtype=cfg.dtype,
            device=run.processes.device(cfg.device),
            decode=cfg.decode,
        )
    return play.policy(run, model, "explorer")


def evolve_stage(
    run: Run, model: StageModel, interval: int, steps: list[int], train: list[Task]
) -> EvolveRecord:
    """Stage `evolve-<interval>`: signals of `steps`, reflection, exploration, synthesis and
    verification; the verified tasks go to the store with their provenance."""
    cfg = run.config
    ad = cfg.agent_data
    name = f"evolve-{interval}"
    seed = derive(cfg.seed, "evolve", interval)

    def stage(out: Path) -> EvolveRecord:
        played = played_steps(run, steps[-1])
        explorer_policy = cache(lambda: explorer(run, model))  # loaded once, if at all
        earlier = run.store.synthesized()
        with _env(run) as env:
            found, per_step = round_signals(run, env, played, steps)
            with (out / "signals.jsonl").open("w", encoding="utf-8") as f:
                f.writelines(json.dumps(s.to_dict()) + "\n" for s in found)
            if ad.explorer.kind == "llm":
                seeds, contexts, malformed = _reflected(
                    run, explorer_policy, out, found, played, train, seed, interval
                )
                play = _played_by(run, explorer_policy, env, seeds, contexts, seed)
            else:
                seeds, contexts, play = _walks(
                    run, env, found, played, steps, train, seed, interval
                )
                malformed = 0
            explorations = _explorations(run, name, interval, seeds, play)
            provenance = [
                {
                    "exploration": row.id,
                    "context": c,
                    "signal": s.signal.to_dict() if s.signal else None,
                }
                for row, s, c in zip(explorations, seeds, contexts, strict=True)
            ]
            made = synthesize(
                env, [r.trajectory for r in explorations], provenance, prefix=str(interval)
            )
            known = train + [s.task for s in earlier if s.stage != name]
            checked = verify(
                env,
                made.candidates,
                known,
                held_out(env, run),
                enabled=ad.verify,
                acceptance=ad.acceptance,
            )
        run.store.add_synthesized(
            [(c.task, c.origin) for c in checked.accepted], stage=name, round=interval
        )
        rejected = dict(checked.rejected)
        if malformed + made.malformed:
            rejected["malformed"] = malformed + made.malformed
        synthesized = len(run.store.synthesized())
        episodes = [r.trajectory for step in steps for r in played.get(step, [])]
        mixed = min(synthesized, round(ad.mixture * cfg.grpo.tasks_per_step))
        record = EvolveRecord(
            round=interval,
            steps=steps,
            signals={kind: sum(f.kind == kind for f in found) for kind in KINDS},
            signals_per_step=per_step,
            explorations=len(explorations),
            candidates=len(made.candidates),
            verified=len(checked.accepted),
            rejected=rejected,
            train_tasks=synthesized,
            explorer=ad.explorer.kind,
            batch_share=batch_share(episodes, earlier),
            next_batch_share=mixed / cfg.grpo.tasks_per_step,
        )
        console.print(f"agent_data round {interval}: {describe_round(record)}")
        return record

    inputs = {
        "model": str(model.path),
        "steps": [steps[0], steps[-1]],
        "agent_data": {k: v for k, v in vars(ad).items() if k != "explorer"},
        "explorer": vars(ad.explorer),
        "seed": seed,
    }
    return run.stage(name, stage, EvolveRecord.from_dict, inputs)


def round_signals(
    run: Run, env: Env, played: dict[int, list[StoredTrajectory]], steps: list[int]
) -> tuple[list[Found], dict[str, dict[str, int]]]:
    """The signals of the round's `steps` (each step's history: every step before it), as
    records naming the step and the store rows of their trajectories; counts per step."""
    ad = run.config.agent_data
    pattern = action_pattern(env)
    ordered = sorted(played)
    found: list[Found] = []
    per_step: dict[str, dict[str, int]] = {}
    for k, step in enumerate(ordered):
        if step not in steps:
            continue
        here = [r.trajectory for r in played[step]]
        earlier = [[r.trajectory for r in played[s]] for s in ordered[:k]]
        signals = step_signals(
            earlier, here, pattern=pattern, window=ad.window, theta=ad.theta, kinds=ad.signals
        )
        per_step[str(step)] = {kind: sum(s.kind == kind for s in signals) for kind in KINDS}
        found += [Found.of(s, step, [played[step][i].id for i in s.trajectories]) for s in signals]
    return found, per_step


def _reflected(
    run: Run,
    explorer_policy: Callable[[], Policy],
    out: Path,
    found: list[Found],
    played: dict[int, list[StoredTrajectory]],
    train: list[Task],
    seed: int,
    interval: int,
) -> tuple[list[Seed], list[str | None], int]:
    """The explorations to run, their contexts, and how many reflections were malformed.

    Kept in `reflections.json` in the stage folder, so a stage rerun after a kill explores
    with the contexts it had, without asking the explorer again."""
    ad = run.config.agent_data
    saved = out / "reflections.json"
    if saved.exists():
        data = json.loads(saved.read_text())
        seeds = [
            Seed(
                Task.from_dict(d["task"]),
                Found.from_dict(d["signal"]) if d["signal"] else None,
                d["key"],
            )
            for d in data["seeds"]
        ]
        return seeds, data["contexts"], data["malformed"]
    contexts: list[str | None]
    if ad.random_exploration:
        seeds = random_seeds(train, ad.explorations, seed, str(interval))
        contexts, malformed = [None] * len(seeds), 0
    else:
        chosen = pick(found, ad.explorations)
        by_row = {r.id: r.trajectory for rows in played.values() for r in rows}
        texts = [reflection_prompt(_signal(f, by_row), [by_row[i] for i in f.rows]) for f in chosen]
        sampling = ad.explorer.sampling.sampling(max_new_tokens=ad.explorer.reflect_tokens)
        answers = (
            reflect(
                explorer_policy(),
                texts,
                sampling,
                seed=seed,
                max_length=run.config.model.max_length,
            )
            if texts
            else []
        )
        kept = [(r, a) for r, a in zip(chosen, answers, strict=True) if a is not None]
        malformed = len(chosen) - len(kept)
        seeds = [
            Seed(by_row[f.rows[0]].task, f, f"{interval}-{k}") for k, (f, _) in enumerate(kept)
        ]
        contexts = [a for _, a in kept]
    record = {
        "seeds": [
            {
                "task": s.task.to_dict(),
                "signal": s.signal.to_dict() if s.signal else None,
                "key": s.key,
            }
            for s in seeds
        ],
        "contexts": contexts,
        "malformed": malformed,
    }
    saved.write_text(json.dumps(record))
    return seeds, contexts, malformed


def _signal(found: Found, by_row: dict[int, Trajectory]) -> Signal:
    """A recorded signal back as a Signal over its own trajectories (indices 0, 1, ...)."""
    task = by_row[found.rows[0]].task
    return Signal(found.kind, task, tuple(range(len(found.rows))), found.detail)


def _explorations(
    run: Run, name: str, interval: int, seeds: list[Seed], play: Callable[[], list[Trajectory]]
) -> list[StoredTrajectory]:
    """The round's exploration episodes, played once and stored (read back on a rerun)."""
    stored = list(run.store.stored_trajectories(stage=name))
    if not stored and seeds:
        run.store.add_trajectories(play(), iteration=interval, stage=name)
        stored = list(run.store.stored_trajectories(stage=name))
    return stored


def _played_by(
    run: Run,
    explorer_policy: Callable[[], Policy],
    env: Env,
    seeds: list[Seed],
    contexts: list[str | None],
    seed: int,
) -> Callable[[], list[Trajectory]]:
    """How the `llm` explorer plays the round's explorations under their contexts."""
    ex = run.config.agent_data.explorer
    sampling = ex.sampling.sampling()
    return lambda: explore_env(
        explorer_policy(),
        run.pool,
        env,
        seeds,
        contexts,
        sampling,
        seed=seed,
        max_length=run.config.model.max_length,
        cut_block=run.config.model.cut_block,
        batch_size=run.config.grpo.rollout_batch_size,
    )


def _walks(
    run: Run,
    env: Env,
    found: list[Found],
    played: dict[int, list[StoredTrajectory]],
    steps: list[int],
    train: list[Task],
    seed: int,
    interval: int,
) -> tuple[list[Seed], list[str | None], Callable[[], list[Trajectory]]]:
    """The explorations of the `random` or `guided` explorer (`walk`): their seeds, contexts,
    and how to play them. Guided weighs patterns by the round's own rollouts."""
    ad = run.config.agent_data
    guided = ad.explorer.kind == "guided"
    chosen = pick(found, ad.explorations) if guided else []
    seeds, plans = plan_round(env, chosen, played, train, ad.explorations, seed, interval)
    weight, ending = None, frozenset[str]()
    if guided:
        episodes = [r.trajectory for step in steps for r in played.get(step, [])]
        weight = rarity(episodes, action_pattern(env))
        ending = ending_patterns(episodes, action_pattern(env))

    def play() -> list[Trajectory]:
        return walks(env, seeds, plans, seed=seed, weight=weight, ending=ending)

    return seeds, [p.context for p in plans], play
