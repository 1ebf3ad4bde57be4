"""The agent papers' ScienceWorld task protocol, as pure functions of the simulator's numbers.

Two ways to choose the tasks (`SPLITS`): `eto`, the default, takes ETO's published task lists
and step budgets as they are (`eto.py`); `sampled` draws them by the rules below, which is what
coevo did before ETO's lists were used.

- Simplification "easy" (teleport, open doors, self-watering pots, no electrical actions).
- `train` comes from the package's train variations, `test_seen` from its dev variations and
  `test_unseen` from its test variations.
- "Longest" task type = the largest *median* gold-path length over a fixed, seeded sample of
  `GOLD_SAMPLE` train variations per type; the `EXCLUDE_LONGEST` longest types are left out.
- A type with more variations in a split than that split's cap is sub-sampled to the cap with a
  fixed seed (a string seed per split and type, so adding a type never reshuffles another).
  The evaluation caps are the papers' 10; the train cap is chosen so that the train split lands
  near the papers' size (see docs/envs.md).
- Step budget of a type = 2 x the longest sampled gold path, rounded up to a multiple of 5 and
  clipped to [10, 120]: room for an agent that errs, and for the unseen variations, whose gold
  paths run longer than the train sample (1.5 x left 18% of the first test paths over budget);
  never more than the papers' 120.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

SIMPLIFICATION = "easy"
SPLITS = ("eto", "sampled")
"""Where the task lists and budgets come from: ETO's published files, or the rules below."""
SOURCE = {"train": "train", "test_seen": "dev", "test_unseen": "test"}
"""Our split -> the package's variation set it is drawn from."""
EXCLUDE_LONGEST = 2
CAPS = {"train": 90, "test_seen": 10, "test_unseen": 10}
"""Variations kept per task type and split (types with more are sub-sampled)."""
SEED = 0
GOLD_SAMPLE = 5
"""Train variations per type whose gold paths define the type's length and budget."""
BUDGET_FACTOR = 2.0
BUDGET_MIN, BUDGET_MAX = 10, 120


@dataclass(frozen=True)
class TypeStats:
    """What the protocol knows about one task type."""

    name: str
    gold_lengths: tuple[int, ...]
    """Gold-path lengths of the sampled train variations."""
    variations: dict[str, tuple[int, ...]]
    """Package split (train/dev/test) -> variation ids."""

    @property
    def median_gold(self) -> float:
        return float(statistics.median(self.gold_lengths)) if self.gold_lengths else 0.0


def rng_for(seed: int, *parts: str) -> random.Random:
    """A generator seeded by a string: stable across Python runs and independent per part."""
    return random.Random(":".join([str(seed), *parts]))


def gold_sample(
    train_variations: list[int], n: int = GOLD_SAMPLE, seed: int = SEED, *, name: str
) -> list[int]:
    """The train variations of type `name` whose gold paths are measured."""
    if len(train_variations) <= n:
        return sorted(train_variations)
    return sorted(rng_for(seed, "gold", name).sample(sorted(train_variations), n))


def longest_types(stats: list[TypeStats], n: int = EXCLUDE_LONGEST) -> list[str]:
    """The `n` types with the largest median gold-path length (ties broken by name)."""
    ranked = sorted(stats, key=lambda s: (-s.median_gold, s.name))
    return [s.name for s in ranked[:n]]


def budget(gold_lengths: tuple[int, ...] | list[int]) -> int:
    """Step budget of a type from its sampled gold-path lengths (rule in the module doc)."""
    longest = max(gold_lengths, default=0)
    rounded = 5 * math.ceil(BUDGET_FACTOR * longest / 5)
    return max(BUDGET_MIN, min(BUDGET_MAX, rounded))


def sample_split(
    variations: list[int] | tuple[int, ...], cap: int, seed: int = SEED, *, split: str, name: str
) -> list[int]:
    """The variations of type `name` kept in `split`: all of them, or `cap` drawn with a seed."""
    ordered = sorted(variations)
    if len(ordered) <= cap:
        return ordered
    return sorted(rng_for(seed, split, name).sample(ordered, cap))
