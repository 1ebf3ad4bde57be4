"""Null cells: how far two runs of one method differ when only their seed does.

A method compared with itself has no true difference, so whatever its seeds' runs show on the
same tasks is noise: the floor a gain between methods must clear. Per env split, every pair of
a method's seeds (SFT, whose runs every other method starts from) is paired task by task,
later seed minus earlier, and tested as a method contrast is (`paired.tested`: tasks up /
down / same, exact sign-flip p, bootstrap interval; one pair of seeds gives no seed-level
interval). Beside them, the spread of the method's per-seed means, the seed spread that
`stats.detectable` needs.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from typing import Any

import torch

from coevo.analysis import stats
from coevo.analysis.paired import HEAD, comparison_cells, markdown_table, task_scores, tested
from coevo.analysis.runs import RunSummary

NULL_METHOD = "sft"


def null_cells(
    runs: list[RunSummary], method: str = NULL_METHOD, metric: str = "reward"
) -> dict[str, Any]:
    """{"method", "metric", "columns", "pairs": {column: {"s2 - s1": tested()}}, "spread":
    {column: {"seeds": {seed: mean}, "mean", "tasks" (per seed), "sd" (None under 2 seeds),
    "task_sd" (of the null pairs' per-task differences), "floor" (the largest |mean
    difference| of a null pair; None without one)}}} for `method`'s finished runs among
    `runs`."""
    envs = list(dict.fromkeys(r.env for r in runs))  # in the order of the runs
    ours = sorted(
        (r for r in runs if r.method == method and r.final_eval and r.seed is not None),
        key=lambda r: (envs.index(r.env), r.seed),
    )
    # column -> seed -> task -> score
    scores: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    for run in ours:
        for split in sorted(run.final_eval):
            found = task_scores(run, split, metric)
            if found:
                scores[f"{run.env} {split}"][int(run.seed)] = found  # type: ignore[arg-type]
    pairs: dict[str, dict[str, dict[str, Any]]] = {}
    spread: dict[str, dict[str, Any]] = {}
    for i, (column, by_seed) in enumerate(scores.items()):
        diffs: list[torch.Tensor] = []
        pairs[column] = {}
        for first, second in itertools.combinations(sorted(by_seed), 2):
            tasks = sorted(by_seed[first].keys() & by_seed[second].keys())
            if not tasks:
                continue
            d = torch.tensor(
                [by_seed[second][t] - by_seed[first][t] for t in tasks], dtype=torch.float64
            )
            diffs.append(d)
            pairs[column][f"s{second} - s{first}"] = tested([d], seed=i)
        means = {seed: statistics.fmean(s.values()) for seed, s in sorted(by_seed.items())}
        spread[column] = {
            "seeds": means,
            "mean": statistics.fmean(means.values()),
            "tasks": statistics.fmean(len(s) for s in by_seed.values()),
            "sd": statistics.stdev(means.values()) if len(means) > 1 else None,
            "task_sd": stats.pooled_sd(diffs),
            "floor": max((abs(p["mean"]) for p in pairs[column].values()), default=None),
        }
    return {
        "method": method,
        "metric": metric,
        "columns": list(scores),
        "pairs": pairs,
        "spread": spread,
    }


def null_markdown(table: dict[str, Any]) -> str:
    """The null pairs and the spread per column as Markdown, or "" with fewer than two seeds
    of the method anywhere."""
    rows = [
        [column, name, *comparison_cells(cells)[:6]]
        for column in table["columns"]
        for name, cells in table["pairs"][column].items()
    ]
    if not rows:
        return ""
    method = table["method"]
    head = ["split", "seeds", *HEAD[2:8]]  # the paired table's cells, from its difference on
    lines = [
        f"### Null cells: {method} against itself at two seeds, paired task by task (x100)",
        "",
        *markdown_table(head, rows),
        "",
        f"The same {method} recipe at two seeds (later minus earlier) has no true difference: "
        "each row is noise, tested as a method contrast is (the paired table's note). A row "
        "whose verdict is not 'not shown' is a seed difference that the task-level test alone "
        "would have called a gain or a loss.",
        "",
        f"### Noise floor per split: {method}'s per-seed means (x100)",
        "",
        "| split | per seed | mean ± sd over seeds | per-task sd of the null differences | "
        "largest null difference (a gain must exceed it) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for column in table["columns"]:
        s = table["spread"][column]
        seeds = ", ".join(f"s{seed} {mean * 100:.1f}" for seed, mean in s["seeds"].items())
        sd = "" if s["sd"] is None else f" ± {s['sd'] * 100:.1f}"
        floor = "-" if s["floor"] is None else f"{s['floor'] * 100:.1f}"
        task_sd = f"{s['task_sd'] * 100:.1f}" if s["floor"] is not None else "-"
        lines.append(f"| {column} | {seeds} | {s['mean'] * 100:.1f}{sd} | {task_sd} | {floor} |")
    return "\n".join(lines)
