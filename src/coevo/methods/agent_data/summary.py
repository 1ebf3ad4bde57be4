"""The synthesized tasks' share of an agent-data round's GRPO batches, and the round said in
one line on the console (its counts are the stage's EvolveRecord)."""

from __future__ import annotations

from collections.abc import Sequence

from coevo.run.records import EvolveRecord
from coevo.store import StoredSynthesized
from coevo.trajectory import Trajectory


def batch_share(episodes: Sequence[Trajectory], synthesized: Sequence[StoredSynthesized]) -> float:
    """The share of `episodes` (a round's GRPO rollouts) that played a synthesized task."""
    ids = {s.task.id for s in synthesized}
    return sum(t.task.id in ids for t in episodes) / len(episodes) if episodes else 0.0


def describe_round(record: EvolveRecord) -> str:
    """The round in one line, for the console."""
    signals = ", ".join(f"{k} {v}" for k, v in record.signals.items())
    rejected = ", ".join(f"{k} {v}" for k, v in record.rejected.items()) or "none"
    return (
        f"signals {signals}; {record.explorer} explorations {record.explorations}, "
        f"candidates {record.candidates}, verified {record.verified}, rejected "
        f"{rejected}; synthesized share of the round's batches {record.batch_share:.0%}, "
        f"of the next ones {record.next_batch_share:.0%}"
    )
