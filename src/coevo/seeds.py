"""Every seed coevo derives from a run's `seed`, by one function.

A run's randomness (the episodes it samples, the order it trains in, the walks it takes) is a
function of its `seed` and of where the draw happens: `derive(seed, "explore", 2)` seeds the
second iteration's exploration, `derive(episode, step)` one step of one episode. Each call site
names its part, so two parts never share a seed by accident (as `seed + 1` for one run's second
agent and the next seed's first would), and a resumed run draws exactly what an uninterrupted one
did.
"""

from __future__ import annotations

import hashlib

TRAINER_BITS = 32
"""Trainer seeds go to numpy too (accelerate's `set_seed`), which takes 32 bits."""


def derive(seed: int, *parts: str | int, bits: int = 63) -> int:
    """A `bits`-bit seed for the part of `seed`'s run that `parts` name (stable across
    processes, machines and Python versions: a hash, not Python's `hash`)."""
    text = "|".join(str(p) for p in (seed, *parts))
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - bits)


def episode_seed(seed: int, task_id: str, sample: int) -> int:
    """The seed of one (task, sample) episode of a rollout seeded `seed`."""
    return derive(seed, task_id, sample)


def trainer_seed(seed: int, *parts: str | int) -> int:
    """The seed a training stage is given: the run's own for the target's first SFT (no
    parts), else derived for the stage that `parts` name."""
    return seed if not parts else derive(seed, *parts, bits=TRAINER_BITS)
