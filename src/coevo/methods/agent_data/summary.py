"""What an agent-data round records beside its EvolveRecord: the explorer's kind and the
synthesized tasks' share of the GRPO batches, written with the record's counts (signals by
kind, explorations, candidates, verified, rejected by reason) to the stage's `round.json`, and
said in one line on the console."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coevo.records import EvolveRecord
from coevo.store import StoredSynthesized
from coevo.trajectory import Trajectory


def batch_share(episodes: Sequence[Trajectory], synthesized: Sequence[StoredSynthesized]) -> float:
    """The share of `episodes` (a round's GRPO rollouts) that played a synthesized task."""
    ids = {s.task.id for s in synthesized}
    return sum(t.task.id in ids for t in episodes) / len(episodes) if episodes else 0.0


def write_summary(
    out: Path, record: EvolveRecord, explorer: str, share: float, next_share: float
) -> dict[str, Any]:
    """`round.json` in the stage folder `out`: the record, `explorer` (its kind),
    `batch_share` (synthesized share of the round's own batches: earlier rounds' tasks) and
    `next_batch_share` (the share the mixture gives each batch after the round)."""
    summary = {
        **record.to_dict(),
        "explorer": explorer,
        "batch_share": share,
        "next_batch_share": next_share,
    }
    (out / "round.json").write_text(json.dumps(summary, indent=2))
    return summary


def describe_round(summary: dict[str, Any]) -> str:
    signals = ", ".join(f"{k} {v}" for k, v in summary["signals"].items())
    rejected = ", ".join(f"{k} {v}" for k, v in summary["rejected"].items()) or "none"
    return (
        f"signals {signals}; {summary['explorer']} explorations {summary['explorations']}, "
        f"candidates {summary['candidates']}, verified {summary['verified']}, rejected "
        f"{rejected}; synthesized share of the round's batches {summary['batch_share']:.0%}, "
        f"of the next ones {summary['next_batch_share']:.0%}"
    )
