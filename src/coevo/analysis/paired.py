"""Paired differences from a baseline method, with bootstrap intervals.

A table's mean ± std over seeds says how far seeds scatter, not whether a method beat SFT.
Every method of an (env, seed) is evaluated greedily on the same held-out tasks, so each task
gives a paired difference: the method's final reward on it minus the baseline run's (same env,
same seed). A column's difference is the mean over seeds of each seed's mean difference over
the tasks both runs evaluated (as the tables average seeds); its 95% interval is a percentile
bootstrap that resamples each seed's tasks with replacement. An interval that holds 0 says the
evaluation cannot tell the two apart at its size.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from coevo.analysis.archive import task_rewards
from coevo.analysis.runs import RunSummary
from coevo.trajectory import is_success

RESAMPLES = 10_000


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


def paired(
    runs: list[RunSummary],
    baseline: str = "sft",
    metric: str = "reward",
    resamples: int = RESAMPLES,
) -> dict[str, Any]:
    """{"baseline", "columns", "rows": {method: {column: Difference.to_dict()}}, "notes"} over
    the runs whose baseline run (same env and seed) is among `runs`."""
    bases = {(r.env, r.seed): r for r in runs if r.method == baseline and r.final_eval}
    # method -> column -> one tensor of paired differences per seed
    diffs: dict[str, dict[str, list[torch.Tensor]]] = defaultdict(lambda: defaultdict(list))
    columns: list[str] = []
    notes: list[str] = []
    cache: dict[tuple[str, str], dict[str, float]] = {}

    def scores(run: RunSummary, split: str) -> dict[str, float]:
        key = (run.path, split)
        if key not in cache:
            cache[key] = task_scores(run, split, metric)
        return cache[key]

    for run in runs:
        base = bases.get((run.env, run.seed))
        if run.method == baseline or not run.final_eval or base is None:
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
            column = f"{run.env} {split}"
            if column not in columns:
                columns.append(column)
            values = [ours[t] - theirs[t] for t in tasks]
            diffs[run.method][column].append(torch.tensor(values, dtype=torch.float64))
    rows = {
        method: {
            column: bootstrap(seeds, resamples, seed=i).to_dict()
            for i, (column, seeds) in enumerate(cols.items())
        }
        for method, cols in diffs.items()
    }
    return {
        "baseline": baseline,
        "metric": metric,
        "columns": columns,
        "rows": rows,
        "notes": notes,
    }


def paired_markdown(table: dict[str, Any]) -> str:
    """The differences as a Markdown table (x100), or "" when there are none."""
    columns, rows = table["columns"], table["rows"]
    if not rows:
        return ""
    lines = [
        f"### {paired_title(table)}",
        "",
        "| method | " + " | ".join(columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for method, cells in rows.items():
        shown = [difference_cell(cells.get(column)) for column in columns]
        lines.append(f"| {method} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def paired_title(table: dict[str, Any]) -> str:
    return (
        f"{table['metric'].capitalize()} minus {table['baseline']}'s on the same tasks and "
        "seed (x100; mean over seeds [95% bootstrap interval over tasks], seeds)"
    )


def difference_cell(d: dict[str, Any] | None) -> str:
    """`+2.5 [-1.0, +6.0], 3` (x100), or `-` for no difference measured."""
    if d is None:
        return "-"
    return f"{d['mean'] * 100:+.1f} [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}], {d['seeds']}"
