"""Tests that decide whether one method beat another on paired tasks: counts, an exact
sign-flip test over tasks, a t interval over seeds, and the verdict both levels allow.

Each paired difference is one task of one seed: a method's reward on it minus the reference
run's (same env, same seed). Two levels of evidence are asked for, as a reviewer would:
- Tasks: a two-sided sign-flip permutation test of the sum of the differences. Under "no
  difference" each non-zero difference is as likely to have had the other sign, so the p-value
  is the share of the 2^n sign patterns whose sum is at least as far from 0 as the observed one.
  Exact (every pattern) for n <= `EXACT_UP_TO`, else a Monte Carlo estimate with a fixed seed.
  Unlike a percentile bootstrap it does not call four tasks up and none down a gain: their
  p is 2/16 = 0.125.
- Seeds: a 95% t interval over the per-seed mean differences (3+ seeds), as seed-to-seed
  spread can be larger than the task-to-task one.

Beside them: the smallest difference a grid of tasks x seeds could detect (`detectable`), a
permutation test of two different task sets (`split_test`: is the gain on test_unseen
larger than on test_seen), and Fisher's exact test of two shares (`fisher_exact`: Table 2's
hard negatives, whose episodes the archives keep as counts, not one by one).

A table of many comparisons tests many hypotheses at once: `holm` adjusts its p-values so that
the chance of any false "p < ALPHA" among them stays under ALPHA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

EXACT_UP_TO = 20
"""Largest number of non-zero differences whose 2^n sign patterns are all enumerated (2^20
sums of float64: 8 MiB)."""
DRAWS = 100_000
"""Sign patterns drawn when there are more non-zero differences than EXACT_UP_TO."""
MIN_SEEDS = 3
"""Fewest seeds that give a seed-level interval (df = seeds - 1 >= 2)."""
ALPHA = 0.05
TIE = 1e-9
"""Rewards lie in [0, 1]: differences (and sums) closer than this are equal, not float noise."""
# Student's t 0.975 quantiles for df 1..30 (95% two-sided), from scipy.stats.t.ppf(0.975, df).
T_975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
Z_975 = 1.959963984540054
# Student's t 0.80 quantiles for df 1..30 (the power term: 80% power), as T_975.
T_80 = (
    1.3764, 1.0607, 0.9785, 0.9410, 0.9195, 0.9057, 0.8960, 0.8889, 0.8834, 0.8791,
    0.8755, 0.8726, 0.8702, 0.8681, 0.8662, 0.8647, 0.8633, 0.8620, 0.8610, 0.8600,
    0.8591, 0.8583, 0.8575, 0.8569, 0.8562, 0.8557, 0.8551, 0.8546, 0.8542, 0.8538,
)  # fmt: skip
Z_80 = 0.8416212335729143
POWER = 0.80
"""Chance of detecting a true difference of `detectable`'s size."""

GAIN, LOSS, NOT_SHOWN = "gain", "loss", "not shown"
TASKS_UP, TASKS_DOWN = "up at task level only", "down at task level only"


@dataclass(frozen=True)
class SignFlip:
    """The task-level test of one comparison."""

    p: float
    """Two-sided p-value; 1.0 when no difference is non-zero."""
    exact: bool
    """Every sign pattern counted (else a Monte Carlo estimate over DRAWS patterns)."""
    nonzero: int


def counts(diffs: torch.Tensor) -> tuple[int, int, int]:
    """(up, down, same): how many paired differences (1-D, one per task of a seed) are above,
    below and at 0."""
    up = int((diffs > TIE).sum())
    down = int((diffs < -TIE).sum())
    return up, down, len(diffs) - up - down


def signed_sums(diffs: torch.Tensor) -> torch.Tensor:
    """Every sum of +-d_i over the 2^n sign patterns of `diffs` (n,): (2^n,)."""
    sums = torch.zeros(1, dtype=torch.float64)
    for d in diffs.tolist():
        sums = torch.cat([sums + d, sums - d])  # each earlier pattern, with d then with -d
    return sums


def sign_flip_test(
    diffs: torch.Tensor, exact_up_to: int = EXACT_UP_TO, draws: int = DRAWS, seed: int = 0
) -> SignFlip:
    """Two-sided sign-flip permutation test of sum(diffs) (1-D) against 0: exact when at most
    `exact_up_to` differences are non-zero (zeros flip to themselves and drop out), else
    (1 + hits) / (1 + draws) over `draws` random patterns, which is never 0."""
    nonzero = diffs[diffs.abs() > TIE].to(torch.float64)
    n = len(nonzero)
    if n == 0:
        return SignFlip(1.0, True, 0)
    observed = abs(float(nonzero.sum())) - TIE  # a pattern as extreme as the data counts
    if n <= exact_up_to:
        sums = signed_sums(nonzero)
        return SignFlip(float((sums.abs() >= observed).double().mean()), True, n)
    generator = torch.Generator().manual_seed(seed)
    hits, left = 0, draws
    while left:
        chunk = min(left, max(1, 1_000_000 // n))  # (chunk, n) signs stay near 8 MiB
        signs = torch.randint(0, 2, (chunk, n), generator=generator, dtype=torch.float64) * 2 - 1
        hits += int(((signs @ nonzero).abs() >= observed).sum())
        left -= chunk
    return SignFlip((1 + hits) / (1 + draws), False, n)


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile: the table up to df 30, then the Cornish-Fisher expansion
    about the normal one (within 2e-6 there)."""
    return _t_quantile(df, T_975, Z_975)


def t_quantile_80(df: int) -> float:
    """Student's t 0.80 quantile, as `t_quantile_975`."""
    return _t_quantile(df, T_80, Z_80)


def _t_quantile(df: int, table: tuple[float, ...], z: float) -> float:
    if df < 1:
        raise ValueError(f"a t quantile needs df >= 1, not {df}.")
    if df <= len(table):
        return table[df - 1]
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def fisher_exact(a: int, n1: int, b: int, n2: int) -> float:
    """Two-sided exact p that `a` of `n1` and `b` of `n2` come from one share: the sum of the
    hypergeometric probabilities of the tables with the same margins that are no more likely
    than the observed one (Fisher's exact test)."""
    if not (0 <= a <= n1 and 0 <= b <= n2):
        raise ValueError(f"counts out of range: {a} of {n1}, {b} of {n2}")
    k, total = a + b, n1 + n2

    def chance(x: int) -> float:
        return math.comb(n1, x) * math.comb(n2, k - x) / math.comb(total, k)

    observed = chance(a)
    tables = range(max(0, k - n2), min(k, n1) + 1)
    return min(1.0, sum(q for x in tables if (q := chance(x)) <= observed * (1 + 1e-7)))


def seed_interval(seed_means: list[float]) -> tuple[float, float] | None:
    """95% t interval (df = seeds - 1) of the mean of the per-seed mean differences; None with
    fewer than MIN_SEEDS seeds."""
    k = len(seed_means)
    if k < MIN_SEEDS:
        return None
    mean = sum(seed_means) / k
    sd = math.sqrt(sum((m - mean) ** 2 for m in seed_means) / (k - 1))
    half = t_quantile_975(k - 1) * sd / math.sqrt(k)
    return mean - half, mean + half


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment of one family of p-values, in their order: the k-th
    smallest (k from 0) times (family size - k), never below the adjusted one before it, at
    most 1. Rejecting where the adjusted p < ALPHA keeps the family-wise error rate under
    ALPHA, whatever the dependence between the tests."""
    adjusted = [0.0] * len(ps)
    running = 0.0
    for k, i in enumerate(sorted(range(len(ps)), key=lambda i: ps[i])):
        running = max(running, min(1.0, (len(ps) - k) * ps[i]))
        adjusted[i] = running
    return adjusted


def verdict(total: float, p: float, interval: tuple[float, float] | None) -> str:
    """What a comparison may be called: a gain (loss) only when the task-level test rejects at
    ALPHA with the differences summing above (below) 0 and the seed-level interval lies wholly
    on that side; with no seed-level interval (too few seeds), at most "at task level only"."""
    if p >= ALPHA or abs(total) <= TIE:
        return NOT_SHOWN
    up = total > 0
    if interval is None:
        return TASKS_UP if up else TASKS_DOWN
    low, high = interval
    if up and low > 0:
        return GAIN
    if not up and high < 0:
        return LOSS
    return NOT_SHOWN


def detectable(
    task_sd: float, seed_sd: float, tasks: float, seeds: int, df: int | None = None
) -> float:
    """The smallest true difference a grid of `tasks` paired tasks per seed x `seeds` seeds
    detects with 80% power (POWER) in a two-sided test at 5% (ALPHA):

        (q_0.975 + q_0.80) * sqrt(task_sd^2 / (tasks * seeds) + seed_sd^2 / seeds)

    The square root is the standard error of the mean over seeds of each seed's mean paired
    difference when each task adds spread `task_sd` (the sd of the paired differences within a
    seed) and each seed a shift of spread `seed_sd`. q: normal quantiles (1.960 + 0.842 =
    2.802, the issue's power figures) when `df` is None; else Student's t with `df` degrees
    of freedom, as the verdict's seed-level t interval has (df = seeds - 1), which few seeds
    make much stricter (df 2: 4.303 + 1.061 = 5.363)."""
    if tasks <= 0 or seeds < 1:
        raise ValueError(f"detectable needs tasks > 0 and seeds >= 1, not {tasks} and {seeds}.")
    q = Z_975 + Z_80 if df is None else t_quantile_975(df) + t_quantile_80(df)
    return q * math.sqrt(task_sd**2 / (tasks * seeds) + seed_sd**2 / seeds)


def pooled_sd(groups: list[torch.Tensor]) -> float:
    """The spread of values about their own group's mean (1-D tensors, one per seed): the
    square root of the pooled within-group variance, sum of squared deviations over
    sum(n_g - 1); 0.0 when no group has two values."""
    squares = sum(float(((g - g.mean()) ** 2).sum()) for g in groups if len(g) > 1)
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    return math.sqrt(squares / df) if df else 0.0


def split_test(
    first: list[torch.Tensor], second: list[torch.Tensor], draws: int = DRAWS, seed: int = 0
) -> float:
    """Two-sided permutation p that two sets of tasks (per seed `s`: `first[s]` and
    `second[s]`, 1-D, distinct tasks) share one distribution of values, for the statistic
    mean over seeds of mean(first[s]) - mean(second[s]); labels are shuffled within each seed
    (a seed's shift stays with it). (1 + hits) / (1 + draws) over `draws` random
    shuffles: there are too many to enumerate at the grid's sizes (C(100, 50) per seed)."""
    observed = abs(_split_statistic(first, second)) - TIE
    generator = torch.Generator().manual_seed(seed)
    hits, left = 0, draws
    width = max(len(a) + len(b) for a, b in zip(first, second, strict=True))
    while left:
        chunk = min(left, max(1, 1_000_000 // width))  # (chunk, n) shuffles stay near 8 MiB
        total = torch.zeros(chunk, dtype=torch.float64)
        for a, b in zip(first, second, strict=True):
            both = torch.cat([a, b]).to(torch.float64)
            order = torch.rand(chunk, len(both), generator=generator).argsort(dim=1)
            shuffled = both[order]  # (chunk, n): each row one relabelling of the seed's tasks
            total += shuffled[:, : len(a)].mean(dim=1) - shuffled[:, len(a) :].mean(dim=1)
        hits += int(((total / len(first)).abs() >= observed).sum())
        left -= chunk
    return (1 + hits) / (1 + draws)


def _split_statistic(first: list[torch.Tensor], second: list[torch.Tensor]) -> float:
    pairs = list(zip(first, second, strict=True))
    return sum(float(a.mean() - b.mean()) for a, b in pairs) / len(pairs)
