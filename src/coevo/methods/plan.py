"""What a run will do before it does it: each method's stages with their sizes, and the time
the run has left once some of them are timed.

A method's plan lists, in its loop's order, the stages the loop runs, each with the work it is
counted in (episodes played, or optimizer steps of SFT, DPO and GRPO) and how much of it.
Sizes come from the recipe and the run's task counts; where a size depends on what an earlier
stage finds (how many expert demonstrations reach reward 1, how many DPO pairs an exploration
gives, which tasks DART finds hard) the plan says "up to" its bound. tests/methods check that
each plan names the stages its loop made.

`announce` says the stages a run has still to run (`pending`), before its first one; after
each stage the runner says how long they should take (`coevo.run.estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from coevo.methods.eto import dpo_settings
from coevo.methods.grpo import interval_ends
from coevo.run.context import Run
from coevo.run.estimate import DPO, EPISODE, GRPO, SFT, Planned
from coevo.train.dpo import DpoConfig


class Scope:
    """What a plan reads from its run: the recipe, the task counts (read once) and what the
    finished stages found."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.config = run.config
        self._tasks: dict[str, int] = {}

    def tasks(self, split: str) -> int:
        if split not in self._tasks:
            self._tasks[split] = len(self.run.tasks(split))
        return self._tasks[split]

    def outputs(self, stage: str) -> dict[str, Any] | None:
        record = self.run.pipeline.manifest(stage)
        return record["outputs"] if record is not None else None

    def done(self, stage: str) -> bool:
        if "<n>" in stage:  # DART's extra rounds, named by their sample count
            stages = self.run.dir / "stages"
            return any(stages.glob(f"{stage.replace('<n>', '*')}/manifest.json"))
        return self.run.pipeline.done(stage)

    def experts(self) -> tuple[int, bool]:
        """(expert demonstrations, whether that is their count rather than a bound): those of
        the finished `experts` stage, else one per train task at most."""
        found = self.outputs("experts")
        if found is not None and "solved" in found:
            return int(found["solved"]), True
        return self.tasks("train"), False


# -- sizes ---------------------------------------------------------------------------------


def optimizer_steps(
    examples: int, batch_size: int, grad_accum: int, epochs: int, procs: int
) -> int:
    """Optimizer steps of `epochs` over `examples` in batches of `batch_size` (the trainers'
    LengthBatches: ceil(examples / batch_size) a pass), `grad_accum` batches a step, the
    batches shared out over `procs` processes."""
    batches = math.ceil(math.ceil(examples / batch_size) / procs)
    return math.ceil(batches / grad_accum) * epochs


def _upto(exact: bool) -> str:
    return "" if exact else "up to "


def _s(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def model_stage(scope: Scope, agent: str | None = None) -> list[Planned]:
    """Stage `model` (`model-<agent>`): only for a model made for the env (a named or given
    checkpoint is no stage)."""
    cfg = scope.config.model
    if cfg.path is not None or cfg.name is not None:
        return []
    warm = f", warmed up for {_s(cfg.pretrain_epochs, 'epoch')}" if cfg.pretrain_epochs else ""
    name = f"model-{agent}" if agent else "model"
    return [Planned(name, f"a {cfg.size} model made for the env{warm}")]


def sft_stage(scope: Scope, name: str, examples: int, exact: bool, what: str) -> Planned:
    cfg = scope.config.sft
    steps = optimizer_steps(
        examples, cfg.batch_size, cfg.grad_accum, cfg.epochs, scope.run.processes.count
    )
    return Planned(
        name,
        f"SFT: {_upto(exact)}{_s(steps, 'optimizer step')} ({_s(cfg.epochs, 'epoch')} over "
        f"{_upto(exact)}{what})",
        SFT,
        steps,
        exact,
    )


def dpo_stage(scope: Scope, name: str, config: DpoConfig, pairs: int, what: str) -> Planned:
    """A DPO stage on the pairs exploration finds: at most `pairs` of them (`what` says which)."""
    if config.steps is not None:
        steps, exact = config.steps, True
    else:
        steps = optimizer_steps(
            pairs, config.batch_size, config.grad_accum, config.epochs, scope.run.processes.count
        )
        exact = False
    return Planned(
        name,
        f"DPO: {_upto(exact)}{_s(steps, 'optimizer step')} on the pairs exploration finds "
        f"(at most {pairs}: {what}; none skips the stage)",
        DPO,
        steps,
        exact,
    )


def evaluation(scope: Scope, iteration: int) -> Planned:
    cfg = scope.config.eval
    counts = {split: scope.tasks(split) for split in cfg.splits}
    how = (
        "greedy" if cfg.sampling.temperature == 0 else f"at temperature {cfg.sampling.temperature}"
    )
    splits = ", ".join(f"{split} {n}" for split, n in counts.items())
    n = sum(counts.values())
    return Planned(f"eval-{iteration}", f"{_s(n, 'episode')} ({splits}), {how}", EPISODE, n)


def exploration(
    scope: Scope, name: str, samples: int | None = None, tasks: int | None = None
) -> Planned:
    samples = samples or scope.config.explore.samples
    tasks = scope.tasks("train") if tasks is None else tasks
    n = tasks * samples
    what = f"{_s(n, 'episode')} ({_s(tasks, 'train task')} x {_s(samples, 'sample')})"
    return Planned(name, what, EPISODE, n)


# -- the methods' plans (each in its loop's order) -------------------------------------------


def start(scope: Scope) -> list[Planned]:
    """The shared start: experts (and experts-valid, with a validation slice), model,
    sft-target, eval-0."""
    train = scope.tasks("train")
    experts, exact = scope.experts()
    held_out = scope.config.env.valid_tasks
    return [
        Planned("experts", f"expert demonstrations of {_s(train, 'train task')}"),
        *(
            [Planned("experts-valid", f"held-out demonstrations of {_s(held_out, 'valid task')}")]
            if held_out
            else []
        ),
        *model_stage(scope),
        sft_stage(scope, "sft-target", experts, exact, _s(experts, "demonstration")),
        evaluation(scope, 0),
    ]


def plan_base(scope: Scope) -> list[Planned]:
    return [*model_stage(scope), evaluation(scope, 0)]


def plan_sft(scope: Scope) -> list[Planned]:
    return start(scope)


def plan_eto(scope: Scope) -> list[Planned]:
    cfg = scope.config
    out = start(scope)
    experts, _ = scope.experts()
    for i in range(1, cfg.iterations + 1):
        pairs = experts * cfg.explore.samples
        out += [
            exploration(scope, f"explore-{i}-target"),
            dpo_stage(scope, f"dpo-{i}-target", dpo_settings(cfg, i), pairs, "expert vs rollout"),
            evaluation(scope, i),
        ]
    return out


def co_evolving(second: str, trained: str | None) -> Callable[[Scope], list[Planned]]:
    """The plan of `co_evolve` with second agent `second`, trained on `trained` pairs
    (`failure`: failure vs failure; `expert`: expert vs its rollouts; None: never trained)."""

    def plan(scope: Scope) -> list[Planned]:
        cfg = scope.config
        experts, exact = scope.experts()
        train, k = scope.tasks("train"), cfg.explore.samples
        within = cfg.failure_agent.within_agent_pairs and k > 1
        # Per task: one failure of each agent crossed, and with `within` the pairs inside one.
        failure_pairs = train * (k * k + (k * (k - 1) if within else 0))
        out = start(scope)
        out += model_stage(scope, second)
        out.append(sft_stage(scope, f"sft-{second}", experts, exact, f"{experts} demonstrations"))
        for i in range(1, cfg.iterations + 1):
            settings = dpo_settings(cfg, i)
            out += [
                exploration(scope, f"explore-{i}-target"),
                exploration(scope, f"explore-{i}-{second}"),
            ]
            if trained == "failure":
                out.append(
                    dpo_stage(scope, f"dpo-{i}-{second}", settings, failure_pairs, "failure pairs")
                )
            elif trained == "expert":
                pairs = experts * k
                out.append(
                    dpo_stage(scope, f"dpo-{i}-{second}", settings, pairs, "expert vs rollout")
                )
            expert_pairs = experts * 2 * k  # the expert against each rollout of both agents
            out += [
                dpo_stage(
                    scope,
                    f"dpo-{i}-target",
                    settings,
                    expert_pairs + failure_pairs,
                    "expert vs rollout and failure pairs",
                ),
                evaluation(scope, i),
            ]
        return out

    return plan


def plan_rft(scope: Scope) -> list[Planned]:
    cfg = scope.config
    rft, train = cfg.rft, scope.tasks("train")
    experts, _ = scope.experts()
    out = start(scope)
    kept = 0  # distinct successes kept so far, at most one per episode played
    for r in range(1, rft.rounds + 1):
        if rft.dart:
            extra = train * (rft.dart_budget - rft.dart_probes)
            out += [
                exploration(scope, f"rft-{r}-probe", samples=rft.dart_probes),
                Planned(
                    f"rft-{r}-extra<n>",
                    f"up to {_s(extra, 'episode')} more on the train tasks the probes found hard",
                    EPISODE,
                    extra,
                    exact=False,
                ),
            ]
            kept += train * rft.dart_budget
        else:
            out.append(exploration(scope, f"rft-{r}", samples=rft.samples))
            kept += train * rft.samples
        what = f"{experts} demonstrations and {kept} successes kept"
        out += [
            sft_stage(scope, f"sft-rft-{r}", experts + kept, False, what),
            evaluation(scope, r),
        ]
    return out


def grpo_steps(scope: Scope, interval: int, first: int, until: int) -> Planned:
    cfg = scope.config.grpo
    n = until - first
    episodes = cfg.tasks_per_step * cfg.samples
    updates = cfg.minibatches * cfg.epochs
    return Planned(
        f"grpo-{interval}",
        f"{_s(n, 'GRPO step')} ({_steps(first + 1, until)} of {cfg.steps}), each "
        f"{_s(episodes, 'episode')} ({cfg.tasks_per_step} tasks x {cfg.samples} samples) and "
        f"{_s(updates, 'optimizer step')} (none where no task's samples differ in reward)",
        GRPO,
        n,
    )


def plan_grpo(scope: Scope) -> list[Planned]:
    out = start(scope)
    first = 0
    for i, until in enumerate(interval_ends(scope.run, scope.config.grpo.eval_every), start=1):
        out += [grpo_steps(scope, i, first, until), evaluation(scope, i)]
        first = until
    return out


def plan_agent_data(scope: Scope) -> list[Planned]:
    """As `coevo.methods.agent_data.loop.run_agent_data`: an evolve round after each interval
    that ends a round (but the last), an evaluation after each that ends at an eval step."""
    cfg = scope.config
    every, steps, ad = cfg.agent_data.synthesis_every, cfg.grpo.steps, cfg.agent_data
    out = start(scope)
    first = round_start = 0
    for i, until in enumerate(interval_ends(scope.run, cfg.grpo.eval_every, every), start=1):
        out.append(grpo_steps(scope, i, first, until))
        if until % every == 0 and until < steps:
            out.append(
                Planned(
                    f"evolve-{i}",
                    f"signals of {_steps(round_start + 1, until)}, {ad.explorations} exploration "
                    f"episodes, synthesis{' and verification' if ad.verify else ''}",
                )
            )
            round_start = until
        if until % cfg.grpo.eval_every == 0 or until == steps:
            out.append(evaluation(scope, i))
        first = until
    return out


def _steps(first: int, last: int) -> str:
    return f"step {last}" if first == last else f"steps {first}-{last}"


# -- what a run prints ---------------------------------------------------------------------


def pending(scope: Scope, planned: list[Planned]) -> list[Planned]:
    return [p for p in planned if not scope.done(p.name)]


def announce(scope: Scope, planned: list[Planned]) -> list[str]:
    """The lines that open a run: the stages it has still to run, each with its work."""
    name = scope.run.pipeline.name
    todo = pending(scope, planned)
    finished = [p.name for p in planned if p not in todo]
    before = f" ({len(finished)} finished before: {', '.join(finished)})" if finished else ""
    if not todo:
        return [f"{name}: plan: all {len(finished)} stages finished before, nothing to run"]
    width = max(len(p.name) for p in todo)
    return [
        f"{name}: plan ({scope.config.method}): {_s(len(todo), 'stage')} to run{before}",
        *(f"  {p.name:<{width}}  {p.what}" for p in todo),
    ]
