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

from coevo.pairs import by_task
from coevo.run.context import Run, StageModel
from coevo.stages import play, training
from coevo.stages.shared import shared_start
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


def sample_round(run: Run, model: StageModel, round_: int, train: list[Task]) -> list[Trajectory]:
    """The round's samples: `rft.samples` per task, or DART's probes and then extra samples
    for the tasks the probes found hard (stages `rft-<round>-probe`, `rft-<round>-extra<n>`)."""
    cfg = run.config.rft
    if not cfg.dart:
        return play.explore(
            run, model, "target", round_, train, samples=cfg.samples, stage_name=f"rft-{round_}"
        )
    probes = play.explore(
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
    played = list(probes)
    for n, group in sorted(by_count.items()):
        played += play.explore(
            run, model, "target", round_, group, samples=n, stage_name=f"rft-{round_}-extra{n}"
        )
    return played


def run_rft(run: Run) -> None:
    start = shared_start(run)
    demos = list(start.experts.values())
    target = start.target
    train = run.tasks("train")
    kept: list[Trajectory] = []
    for round_ in range(1, run.config.rft.rounds + 1):
        kept = distinct_successes(kept + sample_round(run, target, round_, train))
        # Each round fine-tunes the base model afresh, on experts + every success kept so far.
        target = training.sft(run, f"rft-{round_}", start.base, demos + kept, run.config.seed)
        play.evaluate(run, target, round_)
