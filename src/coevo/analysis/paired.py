"""Paired comparisons of methods on the same tasks and seeds: counts, exact test, intervals.

A table's mean ± std over seeds says how far seeds scatter, not whether a method beat SFT.
Every method of an (env, seed) is evaluated greedily on the same held-out tasks, so each task
gives a paired difference: the method's final reward on it minus the reference run's (same env,
same seed). Each method is compared with the baseline (SFT), and the paper's claims add direct
contrasts (`CONTRASTS`): failure-agent minus ETO and minus RFT, each ablation minus
failure-agent.

Per comparison and column (env split), the tables lead with the tests of `coevo.analysis.stats`:
tasks up / down / unchanged (a task of each seed counts once), the exact sign-flip p over those
tasks, the 95% t interval over the per-seed mean differences (3+ seeds), and the verdict both
levels allow. The difference is the mean over seeds of each seed's mean difference (as the
tables average seeds); the percentile bootstrap interval over tasks is kept beside it, though it
is lenient when few tasks change.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from coevo.analysis import stats
from coevo.analysis.archive import task_rewards
from coevo.analysis.runs import RunSummary
from coevo.trajectory import is_success

RESAMPLES = 10_000
# (method, reference) pairs compared directly besides each method minus the baseline: the
# paper's failure-agent > ETO, and > RFT (its other baseline that samples and trains); ETO
# given the failure-agent target's DPO steps (`eto_matched`, benchmarks/learning.py) against
# both, which tells the hard negatives from the extra training; each second-agent ablation
# against the method it ablates; agent_data >= GRPO + 5,
# also with the explorers that need no LLM (benchmarks/learning.py's agent_data_guided and
# agent_data_random), guided against random (the paper: signal feedback beats random
# exploration), each one-signal ablation of the guided row against it, and the guided row
# against its run without verification (the gain verification brings, as the paper reports it).
SIGNAL_ABLATIONS = ("forgetting", "boundary", "rare")
CONTRASTS = (
    ("failure_agent", "eto"),
    ("failure_agent", "rft"),
    ("eto_matched", "failure_agent"),
    ("eto_matched", "eto"),
    ("positive_agent", "failure_agent"),
    ("frozen_failure", "failure_agent"),
    ("agent_data", "grpo"),
    ("agent_data_guided", "grpo"),
    ("agent_data_random", "grpo"),
    ("agent_data_guided", "agent_data_random"),
    *((f"agent_data_{signal}", "agent_data_guided") for signal in SIGNAL_ABLATIONS),
    ("agent_data_guided", "agent_data_unverified"),
)


@dataclass(frozen=True)
class Difference:
    """Method minus baseline on one column (x1: rewards in [0, 1])."""

    mean: float
    low: float
    high: float
    seeds: int
    tasks: int
    """Paired tasks, summed over seeds."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("mean", "low", "high", "seeds", "tasks")}


def task_scores(run: RunSummary, split: str, metric: str = "reward") -> dict[str, float]:
    """Task id -> the run's final-eval score on `split` (the mean, should a task have been
    played more than once); empty when neither the run's store nor its archive
    (`coevo.analysis.archive`) holds that eval."""
    rows = task_rewards(run.path, f"eval-{run.final_iteration}-{split}")
    scores = {}
    for task, rewards in rows.items():
        values = [float(is_success(r)) if metric == "success" else r for r in rewards]
        scores[task] = sum(values) / len(values)
    return scores


def bootstrap(diffs: list[torch.Tensor], resamples: int = RESAMPLES, seed: int = 0) -> Difference:
    """The mean over seeds of each seed's mean paired difference (`diffs`: one 1-D tensor per
    seed), with a 95% percentile interval resampling each seed's tasks."""
    generator = torch.Generator().manual_seed(seed)
    means = torch.stack([d.mean() for d in diffs]).mean()
    draws = torch.zeros(resamples, dtype=torch.float64)
    for d in diffs:
        index = torch.randint(len(d), (resamples, len(d)), generator=generator)
        draws += d[index].mean(dim=1)
    draws /= len(diffs)
    low, high = torch.quantile(draws, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return Difference(float(means), low, high, len(diffs), sum(len(d) for d in diffs))


def tested(diffs: list[torch.Tensor], resamples: int = RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """One comparison on one column (`diffs`: one 1-D tensor of paired differences per seed):
    the bootstrap's mean and interval, then up / down / same over every task of every seed,
    the sign-flip p over them, the seed-level interval (None under 3 seeds) and the verdict."""
    pooled = torch.cat(diffs)  # (tasks summed over seeds,): a task of seed s is the pair (s, task)
    up, down, same = stats.counts(pooled)
    test = stats.sign_flip_test(pooled)
    interval = stats.seed_interval([float(d.mean()) for d in diffs])
    return {
        **bootstrap(diffs, resamples, seed).to_dict(),
        "up": up,
        "down": down,
        "same": same,
        "p": test.p,
        "exact": test.exact,
        "seed_low": None if interval is None else interval[0],
        "seed_high": None if interval is None else interval[1],
        "verdict": stats.verdict(float(pooled.sum()), test.p, interval),
    }


def contrasts(methods: list[str], baseline: str) -> list[tuple[str, str]]:
    """(method, reference) pairs to compare among `methods` (in their order): each other method
    minus `baseline`, then the CONTRASTS whose two methods are both there."""
    pairs = [(m, baseline) for m in methods if m != baseline and baseline in methods]
    return pairs + [(m, r) for m, r in CONTRASTS if m in methods and r in methods]


def label(method: str, reference: str) -> str:
    return f"{method} - {reference}"


def seed_pairs(
    runs: list[RunSummary], baseline: str = "sft", metric: str = "reward"
) -> tuple[list[tuple[str, str, int, torch.Tensor]], list[str]]:
    """([("method - reference", column, seed, the 1-D tensor of that seed's paired
    differences)], notes) for each of `contrasts` whose reference run (same env and seed) is
    among `runs`, in the contrasts' order and the runs' order within each."""
    finished = [r for r in runs if r.final_eval]
    by_key = {(r.method, r.env, r.seed): r for r in finished}
    methods = list(dict.fromkeys(r.method for r in finished))
    pairs: list[tuple[str, str, int, torch.Tensor]] = []
    notes: list[str] = []
    cache: dict[tuple[str, str], dict[str, float]] = {}

    def scores(run: RunSummary, split: str) -> dict[str, float]:
        key = (run.path, split)
        if key not in cache:
            cache[key] = task_scores(run, split, metric)
        return cache[key]

    for method, reference in contrasts(methods, baseline):
        for run in (r for r in finished if r.method == method):
            base = by_key.get((reference, run.env, run.seed))
            if base is None:
                continue
            for split in sorted(run.final_eval):
                ours, theirs = scores(run, split), scores(base, split)
                tasks = sorted(ours.keys() & theirs.keys())
                if not tasks:
                    notes.append(
                        f"{Path(run.path).name} {split}: no tasks evaluated by both it and "
                        f"{Path(base.path).name} in their stores; left out"
                    )
                    continue
                values = torch.tensor([ours[t] - theirs[t] for t in tasks], dtype=torch.float64)
                pairs.append((label(method, reference), f"{run.env} {split}", run.seed, values))
    return pairs, notes


def paired_diffs(
    runs: list[RunSummary], baseline: str = "sft", metric: str = "reward"
) -> tuple[list[str], dict[str, dict[str, list[torch.Tensor]]], list[str]]:
    """(columns, {"method - reference": {column: one 1-D tensor of paired differences per
    seed}}, notes): `seed_pairs` grouped by comparison and column."""
    pairs, notes = seed_pairs(runs, baseline, metric)
    return (*_grouped(pairs), notes)


def _grouped(
    pairs: list[tuple[str, str, int, torch.Tensor]],
) -> tuple[list[str], dict[str, dict[str, list[torch.Tensor]]]]:
    diffs: dict[str, dict[str, list[torch.Tensor]]] = defaultdict(lambda: defaultdict(list))
    for name, column, _, values in pairs:
        diffs[name][column].append(values)
    columns = list(dict.fromkeys(column for _, column, _, _ in pairs))
    return columns, {name: dict(cols) for name, cols in diffs.items()}


def seed_cell(values: torch.Tensor) -> dict[str, Any]:
    """One seed's paired difference: {"mean", "up", "down"} (what the seed-level interval is
    taken over, with the tasks behind it)."""
    up, down, _ = stats.counts(values)
    return {"mean": float(values.mean()), "up": up, "down": down}


def paired(
    runs: list[RunSummary],
    baseline: str = "sft",
    metric: str = "reward",
    resamples: int = RESAMPLES,
) -> dict[str, Any]:
    """{"baseline", "metric", "columns", "rows": {"method - reference": {column: tested(),
    with "p_holm": its p adjusted over every cell of the table (`stats.holm`)}},
    "per_seed": {"method - reference": {column: {seed: seed_cell()}}}, "notes"} for each of
    `contrasts` whose reference run (same env and seed) is among `runs`."""
    pairs, notes = seed_pairs(runs, baseline, metric)
    columns, diffs = _grouped(pairs)
    # Each cell's resampling seed comes from its own name, so a cell's interval and Monte Carlo
    # p stay the same when other envs or comparisons join the table.
    rows = {
        name: {
            column: tested(seeds, resamples, seed=zlib.crc32(f"{name} {column}".encode()))
            for column, seeds in cols.items()
        }
        for name, cols in diffs.items()
    }
    # The table's every test is one family: each cell's p adjusted for all of them.
    cells = [cell for cols in rows.values() for cell in cols.values()]
    for cell, adjusted in zip(cells, stats.holm([c["p"] for c in cells]), strict=True):
        cell["p_holm"] = adjusted
    each_seed: dict[str, dict[str, dict[int, dict[str, Any]]]] = defaultdict(dict)
    for name, column, seed, values in pairs:
        each_seed[name].setdefault(column, {})[seed] = seed_cell(values)
    return {
        "baseline": baseline,
        "metric": metric,
        "columns": columns,
        "rows": rows,
        "per_seed": dict(each_seed),
        "notes": notes,
    }


# -- as tables ----------------------------------------------------------------------------

HEAD = [
    "comparison",
    "split",
    "difference",
    "tasks up / down / same",
    "p (sign-flip)",
    "seed-level 95% t",
    "verdict",
    "bootstrap 95% (tasks)",
    "seeds",
    "p, Holm over the table",
]


def paired_rows(table: dict[str, Any]) -> list[list[str]]:
    """The table's cells, one row per comparison and column, in HEAD's order."""
    return [
        [name, column, *comparison_cells(cells[column]), holm_cell(cells[column])]
        for name, cells in table["rows"].items()
        for column in table["columns"]
        if column in cells
    ]


def comparison_cells(d: dict[str, Any]) -> list[str]:
    """One comparison's cells after its name and column (x100): `+2.5`, `12 / 4 / 34`,
    `0.031`, `[+1.0, +4.0]`, `gain`, `[-1.0, +6.0]`, `3`."""
    return [
        f"{d['mean'] * 100:+.1f}",
        f"{d['up']} / {d['down']} / {d['same']}",
        p_cell(d["p"], d["exact"]),
        interval_cell(d["seed_low"], d["seed_high"], d["seeds"]),
        d["verdict"],
        interval_cell(d["low"], d["high"]),
        str(d["seeds"]),
    ]


def holm_cell(d: dict[str, Any]) -> str:
    """The cell's Holm-adjusted p (`0.012`, `< 0.001`, `1.000`)."""
    return p_cell(d["p_holm"], exact=True)


def p_cell(p: float, exact: bool) -> str:
    """`0.125`, `< 0.001`, with ` (MC)` after a Monte Carlo estimate."""
    shown = "< 0.001" if p < 0.001 else f"{p:.3f}"
    return shown if exact else f"{shown} (MC)"


def interval_cell(low: float | None, high: float | None, seeds: int = 0) -> str:
    """`[-1.0, +6.0]` (x100), or `none (2 seeds)` where there is no interval."""
    if low is None or high is None:
        return f"none ({seeds} seed{'s' * (seeds != 1)})"
    return f"[{low * 100:+.1f}, {high * 100:+.1f}]"


def paired_title(table: dict[str, Any]) -> str:
    return (
        f"{table['metric'].capitalize()}: each method minus {table['baseline']}'s, and direct "
        "contrasts, on the same tasks and seeds (x100)"
    )


def paired_note(table: dict[str, Any]) -> str:
    """Which tests the table used, and what its verdicts mean."""
    return (
        "Difference: mean over seeds of each seed's mean paired difference. Tasks up / down / "
        "same: paired differences, a task of each seed counted once. p: two-sided sign-flip "
        "permutation test of their sum (exact over every sign pattern when at most "
        f"{stats.EXACT_UP_TO} differ from 0; else a Monte Carlo estimate over "
        f"{stats.DRAWS:,} patterns, marked MC). Seed-level: 95% t interval over the per-seed "
        f"mean differences (df = seeds - 1; none under {stats.MIN_SEEDS} seeds). Verdict: "
        f"{stats.GAIN} / {stats.LOSS} only when p < {stats.ALPHA} and the seed-level interval "
        f"excludes 0 on the same side; '{stats.TASKS_UP}' / '{stats.TASKS_DOWN}' when p < "
        f"{stats.ALPHA} with too few seeds for the seed-level check; else {stats.NOT_SHOWN}. "
        "Bootstrap: 95% percentile interval resampling each seed's tasks (lenient when few "
        "tasks change). p, Holm over the table: the sign-flip p adjusted for all "
        f"{sum(map(len, table['rows'].values()))} tests of this table by Holm's step-down "
        f"method; below {stats.ALPHA} the difference holds with the family-wise error rate "
        f"under {stats.ALPHA} (a stricter reading than the verdict's, which takes each test "
        "alone)."
    )


def paired_markdown(table: dict[str, Any]) -> str:
    """The comparisons as a Markdown table with its note, or "" when there are none."""
    rows = paired_rows(table)
    if not rows:
        return ""
    lines = [f"### {paired_title(table)}", "", *markdown_table(HEAD, rows), "", paired_note(table)]
    return "\n".join(lines)


def markdown_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table: the head, its rule, one line per row."""
    return [
        "| " + " | ".join(head) + " |",
        "|" + " --- |" * len(head),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
