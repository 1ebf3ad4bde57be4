"""InterCode-SQL's reward: multiset IoU of result rows, scaled by a Kendall-tau ordering factor.

Rows are compared as their Python text (`str(row)`), as InterCode does, so `1` and `1.0` differ
and row order inside a tuple matters. For predicted rows P and gold rows G as multisets:

    both empty                 -> 1.0
    iou = |P & G| / |P | G|    (per-row counts: min for the intersection, max for the union)
    order = Kendall tau-b between the intersected rows in P's order and in G's order, paired
            position by position and compared as text (InterCode's exact computation: it
            equals the rank correlation when the gold rows are sorted, and is 1 whenever the
            two sequences are identical)
    reward = round2(order * iou) when the intersection is non-empty and tau is defined,
             iou unrounded otherwise (one common row, or all common rows equal: no ordering)

The arithmetic is InterCode's to the last bit: tau as scipy computes it,
(concordant - discordant) / sqrt(n0 - x ties) / sqrt(n0 - y ties), which can give
0.9999999999999999 where the exact value is 1 (0.375 then rounds to 0.37, not 0.38), and
`round2` as numpy rounds the float64 scipy returns (x * 100 to the nearest integer, halves to
even, / 100). InterCode multiplies by tau itself, which can be negative (a reversed order);
here the factor is clipped to [0, 1] so the reward stays in [0, 1] as the Env contract
requires. An error or a missing result scores 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Score:
    """The reward and how it was reached, for `info`."""

    reward: float
    iou: float
    order: float | None
    """Ordering factor applied (clipped tau), or None when no ordering was defined."""
    intersection: int
    union: int
    predicted_rows: int
    gold_rows: int
    error: str | None = None

    def to_info(self) -> dict[str, Any]:
        return {
            "reward": self.reward,
            "iou": round(self.iou, 4),
            "order_factor": None if self.order is None else round(self.order, 4),
            "intersection": self.intersection,
            "union": self.union,
            "predicted_rows": self.predicted_rows,
            "gold_rows": self.gold_rows,
            "error": self.error,
        }


@dataclass(frozen=True)
class GoldRows:
    """A gold result prepared once per task: row texts in order and their counts."""

    texts: tuple[str, ...]
    counts: Counter

    @classmethod
    def of(cls, rows: Sequence[tuple]) -> GoldRows:
        texts = tuple(str(row) for row in rows)
        return cls(texts=texts, counts=Counter(texts))


def score(predicted: Sequence[tuple] | None, gold: GoldRows, error: str | None = None) -> Score:
    """Score predicted rows (None: error or nothing executed) against the gold result."""
    if predicted is None:
        return Score(0.0, 0.0, None, 0, 0, 0, len(gold.texts), error or "no query result")
    texts = [str(row) for row in predicted]
    counts = Counter(texts)
    common = counts & gold.counts
    union = sum((counts | gold.counts).values())
    inter = sum(common.values())
    if union == 0:
        return Score(1.0, 1.0, None, 0, 0, 0, 0)
    iou = inter / union
    order = None
    reward = iou  # InterCode leaves the IoU unrounded when no ordering factor applies
    if inter > 0:
        tau = kendall_tau_b(_keep_common(texts, common), _keep_common(gold.texts, common))
        if not math.isnan(tau):
            order = max(0.0, tau)
            reward = round_cents(order * iou)
    return Score(reward, iou, order, inter, union, len(texts), len(gold.texts))


def round_cents(x: float) -> float:
    """numpy's `round(x, 2)` on a float64, which InterCode's score is: x * 100 rounded to the
    nearest integer (halves to even), / 100. Python's `round(x, 2)` rounds the exact decimal
    value instead and differs on a few values in 100,000."""
    return round(x * 100) / 100


def _keep_common(texts: Sequence[str], common: Counter) -> list[str]:
    """The rows of `texts` that are in the intersection, in order, each up to its count."""
    left = Counter(common)
    kept = []
    for text in texts:
        if left[text] > 0:
            left[text] -= 1
            kept.append(text)
    return kept


def kendall_tau_b(x: Sequence[Any], y: Sequence[Any]) -> float:
    """Kendall's tau-b of two paired sequences (ties handled); NaN when undefined.

    O(n log n): sort pairs by (x, y), count x-ties, joint ties and y-ties, and count discordant
    pairs as the inversions of y in that order (merge sort). Matches scipy.stats.kendalltau
    bit for bit (the same counts, the same floating-point operations).
    """
    n = len(x)
    if n != len(y):
        raise ValueError(f"kendall_tau_b needs sequences of equal length, got {n} and {len(y)}.")
    if n < 2:
        return math.nan
    pairs = sorted(zip(x, y, strict=True))
    x_ties = _tied_pairs([p[0] for p in pairs])
    joint_ties = _tied_pairs(pairs)
    ys = [p[1] for p in pairs]
    discordant = _count_inversions(ys)
    y_ties = _tied_pairs(sorted(ys))
    total = n * (n - 1) // 2
    if x_ties == total or y_ties == total:
        return math.nan
    concordant_minus_discordant = total - x_ties - y_ties + joint_ties - 2 * discordant
    # scipy's order of operations (two square roots, two divisions) and its clip to [-1, 1]:
    # the last bit decides where the score's rounding lands.
    tau = concordant_minus_discordant / math.sqrt(total - x_ties) / math.sqrt(total - y_ties)
    return min(1.0, max(-1.0, tau))


def _tied_pairs(sorted_values: Sequence[Any]) -> int:
    """Number of pairs of equal values in a sorted sequence."""
    ties, run = 0, 1
    for i in range(1, len(sorted_values)):
        if sorted_values[i] == sorted_values[i - 1]:
            run += 1
        else:
            ties += run * (run - 1) // 2
            run = 1
    return ties + run * (run - 1) // 2


def _count_inversions(values: list[Any]) -> int:
    """Pairs i < j with values[i] > values[j] (strictly), by merge sort; sorts `values`."""
    n = len(values)
    if n < 2:
        return 0
    mid = n // 2
    left, right = values[:mid], values[mid:]
    inversions = _count_inversions(left) + _count_inversions(right)
    i = j = k = 0
    while i < len(left) and j < len(right):
        if right[j] < left[i]:
            values[k] = right[j]
            inversions += len(left) - i
            j += 1
        else:
            values[k] = left[i]
            i += 1
        k += 1
    values[k:] = left[i:] + right[j:]
    return inversions
