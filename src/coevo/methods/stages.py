"""The stages every method is made of: experts, base model, SFT, explore, DPO, evaluate.

Each stage runs through the run's `Pipeline`, so it happens once per run directory: a rerun
skips it, and a stage cut off by a kill runs again and resumes from what it stored
(explorations from their committed chunks, trainers from their checkpoints). Trajectories go to
the run's store, tagged with iteration and agent, and later stages read them back from there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coevo.analysis.outcomes import episode_stats, outcome_shares
from coevo.envs.base import EnvError
from coevo.envs.episode import expert_trajectory
from coevo.methods.recipe import RunConfig
from coevo.pipeline import Pipeline, console
from coevo.policy.base import Sampling
from coevo.rollout import EnvPool, rollout
from coevo.store import Store
from coevo.trajectory import Pair, Task, Trajectory

VALID = "valid"


@dataclass
class Run:
    """What the stages of one run share: its recipe, pipeline, store and env pool."""

    config: RunConfig
    pipeline: Pipeline
    store: Store
    pool: EnvPool

    @property
    def dir(self) -> Path:
        return self.pipeline.run_dir

    def tasks(self, split: str) -> list[Task]:
        """The run's tasks of `split`; `valid` is the tail of the env's train split, which
        the run never trains on (settings are chosen there, not on the test splits)."""
        cfg = self.config.env
        env = self.pool.acquire()
        try:
            tasks = env.tasks("train" if split == VALID else split)
        finally:
            self.pool.release(env)
        if split in ("train", VALID):
            held = len(tasks) - cfg.valid_tasks
            if split == VALID:
                return tasks[held:]
            tasks = tasks[:held]
        limit = cfg.train_tasks if split == "train" else cfg.eval_tasks
        return tasks[:limit] if limit is not None else tasks


def experts(run: Run) -> dict[str, Trajectory]:
    """Expert demonstrations of the training tasks, by task id (stage `experts`)."""

    def stage(_: Path) -> dict[str, Any]:
        tasks = run.tasks("train")
        stored = run.store.trajectories(stage="experts")
        if stored:  # committed before a kill cut this stage short
            return {"tasks": len(tasks), "solved": len(stored), "refused": []}
        env = run.pool.acquire()
        trajectories, refused = [], []
        try:
            for task in tasks:
                try:
                    trajectories.append(expert_trajectory(env, task))
                except EnvError as exc:  # e.g. a ScienceWorld gold path found broken
                    refused.append(f"{task.id}: {exc}")
        finally:
            run.pool.release(env)
        # An expert that does not reach 1.0 is no demonstration: left out, and counted.
        solved = [t for t in trajectories if t.reward >= 1.0]
        if len(solved) < len(tasks):
            console.print(
                f"[yellow]experts: {len(tasks) - len(solved)} of {len(tasks)} train tasks have "
                "no demonstration reaching reward 1.0; they are left out[/]"
            )
        run.store.add_trajectories(solved, iteration=-1, stage="experts")
        return {"tasks": len(tasks), "solved": len(solved), "refused": refused[:20]}

    run.pipeline.run("experts", stage)
    return {t.task.id: t for t in run.store.trajectories(stage="experts")}


def base_model(run: Run, seed: int | None = None) -> Path:
    """The starting checkpoint: the configured path, the named pretrained model (converted on
    first use), or a tiny model made for the env.

    A locally initialised model gets its weights from `seed` (default: the run's seed), so two
    agents SFT-trained "independently" also start from independent initialisations; the
    tokenizer is trained on the same corpus either way, so it is the same. With
    `model.pretrain_epochs`, the stage then warms the model up on the expert episodes (`pretrain`).
    """
    if run.config.model.path is not None:
        return Path(run.config.model.path)
    if run.config.model.name is not None:
        from coevo.policy.models import get_model

        return get_model(run.config.model.name, progress=console.print)
    seed = run.config.seed if seed is None else seed
    name = "model" if seed == run.config.seed else f"model-seed{seed}"
    cfg = run.config.model

    def stage(out: Path) -> dict[str, Any]:
        from coevo.policy.tiny import init_model

        env = run.pool.acquire()
        try:
            init_dir = out / ("init" if cfg.pretrain_epochs else "model")
            info = init_model(env, cfg.size, init_dir, seed=seed)
        finally:
            run.pool.release(env)
        if cfg.pretrain_epochs:
            info["pretrain"] = pretrain(run, init_dir, out, seed)
        return {"kind": "model", **info}

    run.pipeline.run(name, stage)
    return run.dir / "stages" / name / "model"


def pretrain(run: Run, start: Path, out: Path, seed: int) -> dict[str, Any]:
    """Language-model warm-up of `start` on the expert episodes, every token learned; the
    model goes to `out/model` (part of the `model` stage, which resumes it after a kill)."""
    from transformers import AutoTokenizer

    from coevo.train.batches import lm_examples
    from coevo.train.sft import train_sft

    tokenizer = AutoTokenizer.from_pretrained(start)
    demos = list(experts(run).values())
    examples = lm_examples(demos, tokenizer, max_length=run.config.model.max_length)
    sft = run.config.sft
    config = replace(
        sft,
        epochs=run.config.model.pretrain_epochs,
        optim=replace(sft.optim, lr=run.config.model.pretrain_lr),
    )
    result = train_sft(str(start), examples, config, output_dir=out, seed=seed, tokenizer=tokenizer)
    losses = [r["loss"] for r in result.history if "loss" in r]
    return {
        "examples": len(examples),
        "steps": result.step,
        "final_loss": losses[-1] if losses else None,
    }


def sft(run: Run, name: str, start: Path, trajectories: list[Trajectory], seed: int) -> Path:
    """Fine-tune `start` on `trajectories` (stage `sft-<name>`); returns the model directory."""

    def stage(out: Path) -> dict[str, Any]:
        from transformers import AutoTokenizer

        from coevo.train.batches import sft_examples
        from coevo.train.sft import train_sft

        tokenizer = AutoTokenizer.from_pretrained(start)
        examples = sft_examples(trajectories, tokenizer, max_length=run.config.model.max_length)
        result = train_sft(
            str(start), examples, run.config.sft, output_dir=out, seed=seed, tokenizer=tokenizer
        )
        losses = [r["loss"] for r in result.history if "loss" in r]
        return {
            "kind": "sft",
            "examples": len(examples),
            "steps": result.step,
            "final_loss": losses[-1] if losses else None,
        }

    run.pipeline.run(f"sft-{name}", stage, {"start": str(start), "trajectories": len(trajectories)})
    return run.dir / "stages" / f"sft-{name}" / "model"


def policy(run: Run, model_dir: Path, name: str):
    from coevo.policy.hf import HFPolicy

    return HFPolicy(
        model_dir, dtype=run.config.model.dtype, device=run.config.model.device, name=name
    )


def explore(
    run: Run,
    model_dir: Path,
    agent: str,
    iteration: int,
    tasks: list[Task],
    *,
    samples: int | None = None,
    temperature: float | None = None,
    stage_name: str | None = None,
) -> list[Trajectory]:
    """Sampled rollouts of `agent` on `tasks` (stage `explore-<iteration>-<agent>`).

    Episodes are stored chunk by chunk, each chunk in one transaction; after a kill the
    stage reruns and plays only the (task, sample) episodes no committed chunk holds.
    """
    cfg = run.config.explore
    samples = samples or cfg.samples
    name = stage_name or f"explore-{iteration}-{agent}"
    sampling = Sampling(
        temperature=cfg.temperature if temperature is None else temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
    )

    def stage(_: Path) -> dict[str, Any]:
        done = {(t.task.id, t.sample) for t in run.store.trajectories(stage=name)}
        todo = [task for task in tasks if any((task.id, k) not in done for k in range(samples))]
        if todo:
            agent_policy = policy(run, model_dir, agent)
            for start in range(0, len(todo), cfg.chunk):
                chunk = todo[start : start + cfg.chunk]
                played = rollout(
                    agent_policy,
                    run.pool,
                    chunk,
                    sampling=sampling,
                    samples=samples,
                    batch_size=cfg.batch_size,
                    seed=run.config.seed * 1000 + iteration,
                    agent=agent,
                    max_length=run.config.model.max_length,
                    description=f"{name} {start + len(chunk)}/{len(todo)}",
                )
                fresh = [t for t in played if (t.task.id, t.sample) not in done]
                run.store.add_trajectories(fresh, iteration=iteration, stage=name)
        played = run.store.trajectories(stage=name)
        stats = episode_stats(played)
        rewards = [t.reward for t in played]
        return {
            "kind": "explore",
            "iteration": iteration,
            "episodes": len(rewards),
            "mean_reward": stats["reward"],
            "stats": {agent: stats},
            "outcomes": {agent: outcome_shares(rewards, run.config.hard_negative_threshold)},
        }

    run.pipeline.run(name, stage, {"model": str(model_dir), "tasks": len(tasks)})
    return run.store.trajectories(stage=name)


def dpo(run: Run, name: str, start: Path, pairs: list[Pair], iteration: int) -> Path:
    """Preference training of `start` on `pairs` (stage `dpo-<iteration>-<name>`).

    The reference is `start` itself, the policy at the iteration's start (ETO); from the
    second iteration on the learning rate and beta switch to `later_lr` / `later_beta`.
    """
    stage_name = f"dpo-{iteration}-{name}"
    if not pairs:
        # Nothing to learn from (e.g. every rollout succeeded): the model carries over.
        run.pipeline.run(stage_name, lambda _: {"kind": "dpo", "pairs": 0, "skipped": True})
        return start

    def stage(out: Path) -> dict[str, Any]:
        from transformers import AutoTokenizer

        from coevo.train.batches import dpo_examples
        from coevo.train.dpo import train_dpo

        # Stored once per stage: a rerun after a kill finds them already there.
        if not run.store.pairs(stage=stage_name):
            run.store.add_pairs(pairs, iteration=iteration, stage=stage_name)
        tokenizer = AutoTokenizer.from_pretrained(start)
        examples = dpo_examples(pairs, tokenizer, max_length=run.config.model.max_length)
        config = run.config.dpo
        if iteration > 1:
            later_lr, later_beta = run.config.later_lr, run.config.later_beta
            config = replace(
                config,
                optim=replace(
                    config.optim, lr=later_lr if later_lr is not None else config.optim.lr
                ),
                beta=later_beta if later_beta is not None else config.beta,
            )
        seed = run.config.seed + iteration
        result = train_dpo(
            str(start), examples, config, output_dir=out, seed=seed, tokenizer=tokenizer
        )
        last = next((r for r in reversed(result.history) if "loss" in r), {})
        kinds: dict[str, int] = {}
        for pair in pairs:
            kinds[pair.kind] = kinds.get(pair.kind, 0) + 1
        return {
            "kind": "dpo",
            "pairs": len(pairs),
            "pair_kinds": kinds,
            "steps": result.step,
            "final": {k: v for k, v in last.items() if isinstance(v, int | float)},
        }

    run.pipeline.run(stage_name, stage, {"start": str(start), "pairs": len(pairs)})
    return run.dir / "stages" / stage_name / "model"


def evaluate(run: Run, model_dir: Path, iteration: int) -> dict[str, Any]:
    """Greedy rollouts of the target on the test splits (stage `eval-<iteration>`)."""
    cfg = run.config.eval
    sampling = Sampling(temperature=0.0, max_new_tokens=cfg.max_new_tokens)

    def stage(_: Path) -> dict[str, Any]:
        target = policy(run, model_dir, "target")
        splits = {}
        for split in cfg.splits:
            name = f"eval-{iteration}-{split}"
            # A split finished before a kill is read back rather than played and stored again.
            played = run.store.trajectories(stage=name)
            if not played:
                played = rollout(
                    target,
                    run.pool,
                    run.tasks(split),
                    sampling=sampling,
                    batch_size=cfg.batch_size,
                    seed=run.config.seed,
                    agent="target",
                    max_length=run.config.model.max_length,
                    description=f"eval {iteration} {split}",
                )
                run.store.add_trajectories(played, iteration=iteration, stage=name)
            splits[split] = episode_stats(played)
        return {"kind": "eval", "iteration": iteration, "splits": splits}

    return run.pipeline.run(f"eval-{iteration}", stage, {"model": str(model_dir)})
