"""Read run directories for the analyses: what each stage recorded, and which paths are runs.

A run directory (written by `coevo run`) holds `config.yaml` (method, env.name, seed) and a
manifest per finished stage, read through its record (`coevo.run.records`). Runs written by older
versions of coevo read too: a field a record did not have keeps its default, a stage kind this
version does not know is left out, and a damaged manifest counts as an unfinished stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from coevo.run.records import (
    DpoRecord,
    EpisodeStats,
    EvalRecord,
    EvolveRecord,
    ExploreRecord,
    read,
)

DEFAULT_THRESHOLD = 0.6


@dataclass(frozen=True)
class Exploration:
    """One agent's episodes in one exploration stage."""

    stage: str
    iteration: int
    agent: str
    shares: dict[str, float]
    """Outcome -> share of the episodes (the paper's Table 2)."""
    episodes: int = 0


@dataclass(frozen=True)
class PreferenceStage:
    """One DPO stage: the pairs it trained on, by kind."""

    stage: str
    iteration: int
    agent: str
    pair_kinds: dict[str, int]
    skipped: bool = False


@dataclass
class RunSummary:
    """What one run directory contributes to the tables and the report."""

    path: str
    method: str
    env: str
    seed: int | None
    threshold: float = DEFAULT_THRESHOLD
    """The run's hard-negative threshold (analysis.hard_negative_threshold)."""
    final_eval: dict[str, EpisodeStats] = field(default_factory=dict)
    """split -> how the last finished eval went."""
    final_iteration: int = -1
    evals: dict[int, dict[str, EpisodeStats]] = field(default_factory=dict)
    """iteration -> split -> scores of every finished eval (0: after SFT)."""
    outcomes: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    """agent -> outcome shares of each exploration."""
    explorations: list[Exploration] = field(default_factory=list)
    preferences: list[PreferenceStage] = field(default_factory=list)
    rounds: list[EvolveRecord] = field(default_factory=list)
    """agent_data: each round's signals, explorations and synthesized tasks."""


def is_run(path: str | Path) -> bool:
    return (Path(path) / "config.yaml").is_file()


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
        threshold=_threshold(config),
    )
    for path in sorted((run_dir / "stages").glob("*/manifest.json")):
        try:
            manifest = json.loads(path.read_text())
            record = read(manifest.get("outputs", {}))
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError):
            continue  # a damaged manifest is an unfinished stage (the run reruns it)
        stage = path.parent.name
        if isinstance(record, EvalRecord):
            summary.evals[record.iteration] = record.splits
            if record.iteration >= summary.final_iteration:
                summary.final_iteration = record.iteration
                summary.final_eval = record.splits
        elif isinstance(record, ExploreRecord):
            for agent, shares in record.outcomes.items():
                summary.outcomes.setdefault(agent, []).append(shares)
                stats = record.stats.get(agent)
                episodes = stats.n if stats is not None else record.episodes
                summary.explorations.append(
                    Exploration(stage, record.iteration, agent, shares, episodes)
                )
        elif isinstance(record, EvolveRecord):
            summary.rounds.append(record)
        elif isinstance(record, DpoRecord):
            iteration, agent = _iteration_and_agent(stage)
            summary.preferences.append(
                PreferenceStage(stage, iteration, agent, record.pair_kinds, record.skipped)
            )
    if summary.final_iteration == 0 and _trains_past_start(config):
        # Its only eval is of the SFT start (adopted from the SFT run, or its own): not yet a
        # score of this method. The per-iteration tables still show it, as iteration 0.
        summary.final_eval = {}
    summary.explorations.sort(key=lambda e: (e.iteration, e.agent))
    summary.preferences.sort(key=lambda p: (p.iteration, p.agent))
    summary.rounds.sort(key=lambda r: r.round)
    return summary


def _trains_past_start(config: dict[str, Any]) -> bool:
    """Whether the run's method trains after the shared SFT start (evaluated as iteration 0):
    every method but `sft` and `base` (whose eval-0 is their score), unless its recipe asks
    for no iteration, round or step."""
    method = config.get("method")
    if method in ("sft", "base"):
        return False
    if method in ("grpo", "agent_data"):  # recipe.GRPO_METHODS (not imported: it loads torch)
        section, key = config.get("grpo") or {}, "steps"
    elif method == "rft":
        section, key = config.get("rft") or {}, "rounds"
    else:
        section, key = config, "iterations"
    value = section.get(key, 1)
    return not isinstance(value, int) or value > 0


def _threshold(config: dict[str, Any]) -> float:
    # Older runs kept it at the top of the recipe.
    analysis = config.get("analysis") or {}
    value = analysis.get("hard_negative_threshold", config.get("hard_negative_threshold"))
    return float(value) if isinstance(value, int | float) else DEFAULT_THRESHOLD


def _iteration_and_agent(stage: str) -> tuple[int, str]:
    """`dpo-2-target` -> (2, "target")."""
    _, number, agent = (stage.split("-", 2) + ["", ""])[:3]
    return (int(number) if number.isdigit() else 0), agent


def read_runs(paths: list[str | Path]) -> tuple[list[RunSummary], list[str]]:
    """The runs among `paths`, and a note for each path skipped because it is not a run
    (`coevo compare runs/demo/*` also meets the demo's compare.md and report folder)."""
    runs, notes = [], []
    for path in paths:
        if is_run(path):
            runs.append(read_run(path))
        elif not Path(path).exists():
            notes.append(f"skipped {str(path)!r}: it does not exist")
        else:
            notes.append(f"skipped {str(path)!r}: not a run directory (no config.yaml)")
    if not runs:
        shown = ", ".join(repr(str(p)) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
        raise FileNotFoundError(
            f"no coevo run directory among {shown}: a run directory holds config.yaml and "
            "stages/ (the --out of `coevo run`)."
        )
    return runs, notes


def training_logs(run_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Stage (trainer folder under `stages/`) -> its `metrics.jsonl` records, in step order.

    Lines that are not JSON objects (a log cut off mid-line by a kill) are left out.
    """
    logs: dict[str, list[dict[str, Any]]] = {}
    stages = Path(run_dir) / "stages"
    for path in sorted(stages.rglob("metrics.jsonl")):
        records = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
        if records:
            logs[str(path.parent.relative_to(stages))] = records
    return logs
