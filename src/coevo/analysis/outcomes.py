"""Outcome shares of an exploration (the paper's Table 2): success, hard negative, failure.

success: r = 1; hard negative: threshold <= r < 1 (0.6 in the paper); failure: r < threshold.
"""

from __future__ import annotations

from collections.abc import Iterable

OUTCOMES: tuple[str, ...] = ("success", "hard_negative", "failure")


def outcome(reward: float, threshold: float = 0.6) -> str:
    if reward >= 1.0:
        return "success"
    return "hard_negative" if reward >= threshold else "failure"


def outcome_shares(rewards: Iterable[float], threshold: float = 0.6) -> dict[str, float]:
    """Share of each outcome among `rewards` (all zeros for an empty list)."""
    counts = dict.fromkeys(OUTCOMES, 0)
    n = 0
    for reward in rewards:
        counts[outcome(reward, threshold)] += 1
        n += 1
    return {k: (v / n if n else 0.0) for k, v in counts.items()}
