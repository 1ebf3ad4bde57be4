"""RFT: rejection-sampling fine-tuning, optionally with DART-style difficulty-aware sampling.

Each round samples the current model on the training tasks, keeps the distinct successful
trajectories, and fine-tunes the base model on experts + everything kept so far.

DART-style: every task first gets `dart_probes` samples; a task that succeeded in a share s of
its probes then gets ceil((dart_budget - dart_probes) * (1 - s)) more, so the hardest tasks
get up to `dart_budget` samples in all and easy ones none extra.
"""

from __future__ import annotations

import math
from collections import defaultdict

from coevo.methods import stages
from coevo.methods.stages import Run
from coevo.pairs import by_task
from coevo.trajectory import Task, Trajectory


def extra_samples(rollouts: list[Trajectory], probes: int, budget: int) -> dict[str, int]:
    """DART allocation: more samples for tasks whose probes succeeded less often."""
    extra = {}
    for task_id, group in by_task(rollouts).items():
        rate = sum(t.success for t in group) / max(len(group), 1)
        extra[task_id] = math.ceil((budget - probes) * (1.0 - rate))
    return extra


def distinct_successes(rollouts: list[Trajectory]) -> list[Trajectory]:
    seen, kept = set(), []
    for t in rollouts:
        key = (t.task.id, tuple(t.agent_texts))
        if t.success and key not in seen:
            seen.add(key)
            kept.append(t)
    return kept


def sample_round(run: Run, model, round_: int, train: list[Task]) -> list[Trajectory]:
    cfg = run.config.rft
    if not cfg.dart:
        return stages.explore(
            run, model, "target", round_, train, samples=cfg.samples, stage_name=f"rft-{round_}"
        )
    probes = stages.explore(
        run,
        model,
        "target",
        round_,
        train,
        samples=cfg.dart_probes,
        stage_name=f"rft-{round_}-probe",
    )
    by_count: dict[int, list[Task]] = defaultdict(list)
    tasks = {t.id: t for t in train}
    for task_id, n in extra_samples(probes, cfg.dart_probes, cfg.dart_budget).items():
        if n > 0:
            by_count[n].append(tasks[task_id])
    rollouts = list(probes)
    for n, group in sorted(by_count.items()):
        rollouts += stages.explore(
            run, model, "target", round_, group, samples=n, stage_name=f"rft-{round_}-extra{n}"
        )
    return rollouts


def run_rft(run: Run) -> None:
    experts = stages.experts(run)
    base = stages.base_model(run)
    demos = list(experts.values())
    target = stages.sft(run, "target", base, demos, seed=run.config.seed)
    stages.evaluate(run, target, iteration=0)
    train = run.tasks("train")
    kept: list[Trajectory] = []
    for round_ in range(1, run.config.rft.rounds + 1):
        kept = distinct_successes(kept + sample_round(run, target, round_, train))
        target = stages.sft(run, f"rft-{round_}", base, demos + kept, seed=run.config.seed)
        stages.evaluate(run, target, round_)
