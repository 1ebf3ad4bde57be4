"""Compare runs: the paper's Table 3 (reward per method x env/split) and Table 2 (outcomes).

Reads run directories written by `coevo run`: `config.yaml` (method, env.name, seed) and the
stage manifests, through their records (`coevo.records`): each eval stage's `EvalRecord`
(episode stats per split) and each exploration's `ExploreRecord` (outcome shares per agent).
A method's score in a run is its last finished eval; cells are mean +- std over seeds.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from coevo.analysis.outcomes import OUTCOMES
from coevo.records import EpisodeStats, EvalRecord, ExploreRecord, read

METRICS = ("reward", "success")
# Per-episode behaviour every eval records beside its reward (`outcomes.episode_stats`).
BEHAVIOUR = ("format_error_rate", "invalid_action_rate", "mean_steps")


@dataclass
class RunSummary:
    """What one run directory contributes to the tables."""

    path: str
    method: str
    env: str
    seed: int | None
    final_eval: dict[str, EpisodeStats] = field(default_factory=dict)
    """split -> how the last finished eval went."""
    final_iteration: int = -1
    evals: dict[int, dict[str, EpisodeStats]] = field(default_factory=dict)
    """iteration -> split -> scores of every finished eval (0: after SFT)."""
    outcomes: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    """agent -> outcome shares of each exploration."""


def read_run(run_dir: str | Path) -> RunSummary:
    run_dir = Path(run_dir)
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} is not a coevo run directory (no config.yaml).")
    config = yaml.safe_load(config_path.read_text()) or {}
    summary = RunSummary(
        path=str(run_dir),
        method=str(config.get("name") or config.get("method", "?")),
        env=str((config.get("env") or {}).get("name", "?")),
        seed=config.get("seed"),
    )
    manifests = sorted((run_dir / "stages").glob("*/manifest.json"))
    for path in manifests:
        try:
            record = read(json.loads(path.read_text()).get("outputs", {}))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # a damaged manifest is an unfinished stage (the run reruns it)
        if isinstance(record, EvalRecord):
            summary.evals[record.iteration] = record.splits
            if record.iteration >= summary.final_iteration:
                summary.final_iteration = record.iteration
                summary.final_eval = record.splits
        elif isinstance(record, ExploreRecord):
            for agent, shares in record.outcomes.items():
                summary.outcomes.setdefault(agent, []).append(shares)
    return summary


def _cell(values: list[float], scale: float = 100.0) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values) * scale
    if len(values) == 1:
        return f"{mean:.1f}"
    return f"{mean:.1f} ± {statistics.stdev(values) * scale:.1f}"


def compare(run_dirs: list[str | Path], metric: str = "reward") -> dict[str, Any]:
    """Tables as data: {"columns", "rows": {method: {column: [values]}}, "outcomes": ...}."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}.")
    runs = [read_run(d) for d in run_dirs]
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    columns: list[str] = []
    outcome_rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    # method -> column -> iteration -> values over seeds
    by_iteration: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    # method -> column -> iteration -> behaviour stat -> values over seeds
    behaviour: dict[str, dict[str, dict[int, dict[str, list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    )
    for run in runs:
        for iteration, splits in run.evals.items():
            for split, scores in splits.items():
                column = f"{run.env} {split}"
                by_iteration[run.method][column][iteration].append(float(getattr(scores, metric)))
                for stat in BEHAVIOUR:
                    value = getattr(scores, stat)
                    if value is not None:  # evals recorded before these stats existed lack them
                        behaviour[run.method][column][iteration][stat].append(value)
        for split, scores in sorted(run.final_eval.items()):
            column = f"{run.env} {split}"
            if column not in columns:
                columns.append(column)
            rows[run.method][column].append(float(getattr(scores, metric)))
        for agent, explorations in run.outcomes.items():
            for shares in explorations:
                for name in OUTCOMES:
                    outcome_rows[f"{run.method} / {agent}"][f"{run.env} {name}"].append(
                        shares[name]
                    )
    return {
        "metric": metric,
        "columns": columns,
        "rows": {m: dict(c) for m, c in rows.items()},
        "outcomes": {m: dict(c) for m, c in outcome_rows.items()},
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
        "runs": [r.path for r in runs],
    }


def to_markdown(tables: dict[str, Any]) -> str:
    columns = tables["columns"]
    lines = [
        f"### Average {tables['metric']} (x100, mean ± std over seeds)",
        "",
        "| method | " + " | ".join(columns) + " | average |",
        "| --- |" + " --- |" * (len(columns) + 1),
    ]
    for method, cells in tables["rows"].items():
        means = [statistics.fmean(cells[c]) for c in columns if cells.get(c)]
        average = f"{statistics.fmean(means) * 100:.1f}" if means else "-"
        lines.append(
            f"| {method} | "
            + " | ".join(_cell(cells.get(c, [])) for c in columns)
            + f" | {average} |"
        )
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
        for method, cols in iterations.items():
            for column, its in cols.items():
                cells = [_cell(its.get(str(i), [])) for i in range(last + 1)]
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
    if tables["outcomes"]:
        envs = sorted({c.rsplit(" ", 1)[0] for cells in tables["outcomes"].values() for c in cells})
        out_columns = [f"{e} {o}" for e in envs for o in OUTCOMES]
        lines += [
            "",
            "### Exploration outcomes (% of rollouts, mean over explorations and seeds)",
            "",
            "| method / agent | " + " | ".join(out_columns) + " |",
            "| --- |" + " --- |" * len(out_columns),
        ]
        for name, cells in tables["outcomes"].items():
            row = [
                f"{statistics.fmean(cells[c]) * 100:.1f}" if cells.get(c) else "-"
                for c in out_columns
            ]
            lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
