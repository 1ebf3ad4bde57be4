"""Example episodes of a run to read: its best episode, a hard negative and a failure.

Taken from what the agents played (exploration, evaluation and GRPO rollouts, not the expert
demonstrations), latest iteration first, read from the run's store without writing to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coevo.analysis.outcomes import outcome
from coevo.store import Store, StoreError, store_path
from coevo.trajectory import Trajectory

# Stages whose trajectories an agent played (training stages store copies with their pairs).
PLAYED = ("explore-", "eval-", "grpo-")
LABELS = {"best": "best", "hard_negative": "a hard negative", "failure": "a failure"}


@dataclass(frozen=True)
class Example:
    """One episode to show, with why it was picked and where it was played."""

    kind: str
    """`best`, `hard_negative` or `failure`."""
    stage: str
    iteration: int
    trajectory: Trajectory

    @property
    def label(self) -> str:
        return LABELS[self.kind]


def pick_examples(run_dir: str | Path, threshold: float) -> list[Example]:
    """The run's best played episode, its latest hard negative and its latest failure (each
    when there is one); none for a run without a store."""
    if not store_path(run_dir).exists():
        return []
    played: list[tuple[str, int, int, Trajectory]] = []  # (stage, iteration, row id, episode)
    try:
        with Store(run_dir, readonly=True) as store:
            for stage in store.stages():
                if stage.startswith(PLAYED):
                    played += [
                        (stage, s.iteration, s.id, s.trajectory)
                        for s in store.stored_trajectories(stage=stage)
                        if s.trajectory.agent != "expert"
                    ]
    except StoreError:
        return []  # a damaged store: the rest of the report still stands
    if not played:
        return []
    examples = []
    # Best: the highest reward, from the latest iteration among equals.
    stage, iteration, _, best = max(played, key=lambda p: (p[3].reward, p[1], -p[2]))
    examples.append(Example("best", stage, iteration, best))
    for kind in ("hard_negative", "failure"):
        found = [p for p in played if outcome(p[3].reward, threshold) == kind and p[3] is not best]
        if found:
            stage, iteration, _, episode = max(found, key=lambda p: (p[1], -p[2]))
            examples.append(Example(kind, stage, iteration, episode))
    return examples
