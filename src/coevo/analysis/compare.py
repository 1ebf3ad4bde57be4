"""Compare runs: the paper's Table 3 (reward per method x env/split) and Table 2 (outcomes).

Reads run directories written by `coevo run` (`coevo.analysis.runs`): each eval stage's
`EvalRecord` (episode stats per split) and each exploration's `ExploreRecord` (outcome shares
per agent). A method's score in a run is its last finished eval; cells are mean +- std over
seeds, with the number of episodes behind them; with a baseline method (SFT), each method's
difference from it on the same tasks and seeds, and the direct contrasts (failure-agent minus
ETO, each ablation minus failure-agent), each with tasks up / down / same, an exact sign-flip
test over tasks, a t interval over seeds and a verdict (`paired`). Paths that are not runs are
skipped with a note.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from coevo.analysis.outcomes import OUTCOMES
from coevo.analysis.paired import markdown_table, paired, paired_markdown
from coevo.analysis.runs import read_run, read_runs

__all__ = ["METRICS", "cell", "compare", "per_seed_tables", "read_run", "to_markdown"]

METRICS = ("reward", "success")
# Per-episode behaviour every eval records beside its reward (`outcomes.episode_stats`).
BEHAVIOUR = ("format_error_rate", "invalid_action_rate", "mean_steps")


def cell(values: list[float], episodes: int = 0, scale: float = 100.0) -> str:
    """`mean ± std (n=episodes)`: the std over seeds, the episodes summed over them (a run
    from before episode counts were recorded shows none)."""
    if not values:
        return "-"
    mean = statistics.fmean(values) * scale
    count = f" (n={episodes})" if episodes else ""
    if len(values) == 1:
        return f"{mean:.1f}{count}"
    return f"{mean:.1f} ± {statistics.stdev(values) * scale:.1f}{count}"


def compare(
    run_dirs: list[str | Path], metric: str = "reward", baseline: str | None = "sft"
) -> dict[str, Any]:
    """Tables as data: {"columns", "rows": {method: {column: [values]}}, "episodes": {method:
    {column: n}}, "seed_scores": {method: {column: {seed: score}}}, "outcomes",
    "outcomes_per_iteration", "iterations", "behaviour", "rounds" (agent_data's, per method),
    "paired" (comparisons with `baseline`'s runs and the direct
    contrasts, `paired.paired`; None without a baseline), "runs", "skipped": [notes]}."""
    if metric not in METRICS:
        raise ValueError(f"--metric must be one of {', '.join(METRICS)}, not {metric!r}.")
    runs, skipped = read_runs(list(run_dirs))
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    episodes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    # method -> column -> iteration -> episodes summed over seeds
    iteration_episodes: dict[str, dict[str, dict[int, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    columns: list[str] = []
    outcome_rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    # "method / agent" -> iteration -> column -> values over seeds
    outcome_iterations: dict[str, dict[int, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    # method -> column -> iteration -> values over seeds
    by_iteration: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    # method -> column -> iteration -> behaviour stat -> values over seeds
    behaviour: dict[str, dict[str, dict[int, dict[str, list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    )
    # method -> column -> seed -> the run's final score
    seed_scores: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    # method -> every round of its runs, each with its run's env and seed
    rounds: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for r in run.rounds:
            rounds.setdefault(run.method, []).append(
                {"env": run.env, "seed": run.seed, **r.to_dict()}
            )
        for iteration, splits in run.evals.items():
            for split, scores in splits.items():
                column = f"{run.env} {split}"
                by_iteration[run.method][column][iteration].append(float(getattr(scores, metric)))
                iteration_episodes[run.method][column][iteration] += scores.n
                for stat in BEHAVIOUR:
                    value = getattr(scores, stat)
                    if value is not None:  # evals recorded before these stats existed lack them
                        behaviour[run.method][column][iteration][stat].append(value)
        cells = rows[run.method]  # listed even before its first eval of its own: "-" cells
        for split, scores in sorted(run.final_eval.items()):
            column = f"{run.env} {split}"
            if column not in columns:
                columns.append(column)
            cells[column].append(float(getattr(scores, metric)))
            episodes[run.method][column] += scores.n
            seed_scores[run.method][column][run.seed] = float(getattr(scores, metric))
        for agent, explorations in run.outcomes.items():
            for shares in explorations:
                for name in OUTCOMES:
                    outcome_rows[f"{run.method} / {agent}"][f"{run.env} {name}"].append(
                        shares[name]
                    )
        for e in run.explorations:
            for name in OUTCOMES:
                outcome_iterations[f"{run.method} / {e.agent}"][e.iteration][
                    f"{run.env} {name}"
                ].append(e.shares[name])
    return {
        "metric": metric,
        "columns": columns,
        "rows": {m: dict(c) for m, c in rows.items()},
        "episodes": {m: dict(c) for m, c in episodes.items()},
        "outcomes": {m: dict(c) for m, c in outcome_rows.items()},
        "outcomes_per_iteration": {
            m: {str(i): dict(c) for i, c in sorted(its.items())}
            for m, its in outcome_iterations.items()
        },
        "iterations": {
            m: {c: {str(i): v for i, v in sorted(its.items())} for c, its in cols.items()}
            for m, cols in by_iteration.items()
        },
        "behaviour": {
            m: {
                c: {
                    str(i): {k: statistics.fmean(v) for k, v in st.items()} for i, st in its.items()
                }
                for c, its in cols.items()
            }
            for m, cols in behaviour.items()
        },
        "iteration_episodes": {
            m: {c: {str(i): n for i, n in sorted(its.items())} for c, its in cols.items()}
            for m, cols in iteration_episodes.items()
        },
        "seed_scores": {m: dict(c) for m, c in seed_scores.items()},
        "rounds": rounds,
        "paired": _ordered(paired(runs, baseline, metric), columns) if baseline else None,
        "runs": [r.path for r in runs],
        "skipped": skipped,
    }


def _ordered(table: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    """The paired table with its columns in the main table's order."""
    return {**table, "columns": [c for c in columns if c in table["columns"]]}


def held_out_average(cells: dict[str, list[float]], columns: list[str]) -> str:
    """A row's mean over the test columns (x100), or `-` where the row lacks one of them: an
    average over other columns than the next row's would not compare. The validation slice
    chooses settings; it is not a held-out score, so not averaged."""
    held_out = [c for c in columns if not c.endswith(" valid")]
    if not held_out or not all(cells.get(c) for c in held_out):
        return "-"
    return f"{statistics.fmean(statistics.fmean(cells[c]) for c in held_out) * 100:.1f}"


def to_markdown(tables: dict[str, Any]) -> str:
    columns = tables["columns"]
    counts = tables.get("episodes") or {}
    lines = [
        f"### Average {tables['metric']} (x100, mean ± std over seeds; n = episodes)",
        "",
        "| method | " + " | ".join(columns) + " | average (test splits) |",
        "| --- |" + " --- |" * (len(columns) + 1),
    ]
    rows = tables["rows"] if columns else {}
    if not columns:  # runs still in their first stages: nothing evaluated yet
        lines[2:] = ["No finished evaluation yet: " + ", ".join(tables["rows"]) + "."]
    for method, cells in rows.items():
        average = held_out_average(cells, columns)
        lines.append(
            f"| {method} | "
            + " | ".join(cell(cells.get(c, []), counts.get(method, {}).get(c, 0)) for c in columns)
            + f" | {average} |"
        )
    differences = paired_markdown(tables["paired"]) if tables.get("paired") else ""
    if differences:
        lines += ["", differences]
    lines += per_seed_markdown(tables)
    iterations = tables.get("iterations") or {}
    if iterations:
        last = max(int(i) for cols in iterations.values() for its in cols.values() for i in its)
        lines += [
            "",
            f"### {tables['metric'].capitalize()} per iteration (x100; 0 = after SFT)",
            "",
            "| method | split | " + " | ".join(str(i) for i in range(last + 1)) + " |",
            "| --- | --- |" + " --- |" * (last + 1),
        ]
        per_iteration = tables.get("iteration_episodes") or {}
        for method, cols in iterations.items():
            for column, its in cols.items():
                n = per_iteration.get(method, {}).get(column, {})
                cells = [cell(its.get(str(i), []), n.get(str(i), 0)) for i in range(last + 1)]
                lines.append(f"| {method} | {column} | " + " | ".join(cells) + " |")
    behaviour = tables.get("behaviour") or {}
    if any(its for cols in behaviour.values() for its in cols.values()):
        lines += [
            "",
            "### How the agent acted per iteration (format errors and invalid actions: % of "
            "steps; mean steps per episode; mean over seeds)",
            "",
            "| method | split | iteration | format errors | invalid actions | mean steps |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for method, cols in behaviour.items():
            for column, its in cols.items():
                for i, st in sorted(its.items(), key=lambda kv: int(kv[0])):
                    lines.append(
                        f"| {method} | {column} | {i} | "
                        f"{st.get('format_error_rate', 0) * 100:.1f} | "
                        f"{st.get('invalid_action_rate', 0) * 100:.1f} | "
                        f"{st.get('mean_steps', 0):.2f} |"
                    )
    rounds = tables.get("rounds") or {}
    if rounds:
        lines += [
            "",
            "### Agent-data rounds (signals of the round's steps; tasks synthesized from them)",
            "",
            "| method | env | seed | round | explorer | forgetting | boundary | rare | "
            "explorations | candidates | verified | rejected | synthesized share of batches |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for method, records in rounds.items():
            for r in records:
                signals = " | ".join(
                    str(r["signals"].get(k, 0)) for k in ("forgetting", "boundary", "rare")
                )
                rejected = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected"].items())) or "-"
                share = f"{r.get('batch_share', 0):.0%} -> {r.get('next_batch_share', 0):.0%}"
                lines.append(
                    f"| {method} | {r['env']} | {r['seed']} | {r['round']} | "
                    f"{r.get('explorer', 'llm')} | {signals} | {r['explorations']} | "
                    f"{r['candidates']} | {r['verified']} | {rejected} | {share} |"
                )
    if tables["outcomes"]:
        envs = sorted({c.rsplit(" ", 1)[0] for cells in tables["outcomes"].values() for c in cells})
        out_columns = [f"{e} {o}" for e in envs for o in OUTCOMES]
        lines += [
            "",
            "### Exploration outcomes (% of rollouts, mean over explorations and seeds)",
            "",
            *markdown_table(
                ["method / agent", *out_columns],
                [
                    [name, *_shares(cells, out_columns)]
                    for name, cells in tables["outcomes"].items()
                ],
            ),
        ]
        per_iteration = tables.get("outcomes_per_iteration") or {}
        if any(len(its) > 1 for its in per_iteration.values()):
            # An agent's later explorations come after its DPO: the paper's Table 2 effect shows
            # there, not in the first (both agents then plain SFT agents).
            rows = [
                [name, str(i), *_shares(cells, out_columns)]
                for name, its in per_iteration.items()
                for i, cells in its.items()
            ]
            lines += [
                "",
                "### Exploration outcomes per iteration (% of rollouts, mean over seeds)",
                "",
                *markdown_table(["method / agent", "iteration", *out_columns], rows),
            ]
    return "\n".join(lines) + "\n"


def per_seed_tables(tables: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, head, rows) of each run's score and of each paired difference, seed by seed
    (x100): the spread that the seed-level interval sees and a mean ± std hides. Rows only for
    what has 2+ seeds; [] when nothing has."""
    scores = tables.get("seed_scores") or {}
    each = (tables.get("paired") or {}).get("per_seed") or {}
    seeds = sorted({s for cols in scores.values() for by_seed in cols.values() for s in by_seed})
    head = [f"s{s}" for s in seeds]
    score_rows = [
        [method, column, *(_score(by_seed.get(s)) for s in seeds)]
        for method, cols in scores.items()
        for column, by_seed in cols.items()
        if len(by_seed) > 1
    ]
    difference_rows = [
        [name, column, *(_difference(by_seed.get(s)) for s in seeds)]
        for name, cols in each.items()
        for column, by_seed in cols.items()
        if len(by_seed) > 1
    ]
    metric = tables["metric"].capitalize()
    made = [
        (
            f"{metric} per seed (x100; each run's last finished evaluation)",
            ["method", "split", *head],
            score_rows,
        ),
        (
            "Each seed's paired difference (x100; tasks up / down): the per-seed means the "
            "seed-level interval is taken over",
            ["comparison", "split", *head],
            difference_rows,
        ),
    ]
    return [table for table in made if table[2]]


def per_seed_markdown(tables: dict[str, Any]) -> list[str]:
    """`per_seed_tables` as Markdown lines, each table after a blank line and its heading."""
    lines: list[str] = []
    for title, head, rows in per_seed_tables(tables):
        lines += ["", f"### {title}", "", *markdown_table(head, rows)]
    return lines


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def _difference(cell: dict[str, Any] | None) -> str:
    return "-" if cell is None else f"{cell['mean'] * 100:+.1f} ({cell['up']} / {cell['down']})"


def _shares(cells: dict[str, list[float]], columns: list[str]) -> list[str]:
    """Outcome shares as table cells: % mean over the explorations behind each, `-` for none."""
    return [f"{statistics.fmean(cells[c]) * 100:.1f}" if cells.get(c) else "-" for c in columns]
