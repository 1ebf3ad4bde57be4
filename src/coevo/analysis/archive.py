"""A run's results without its weights or episodes: small enough to commit beside a benchmark.

A learning run's checkpoints and store run to gigabytes and live in an ignored run folder, which
a fresh clone (or another machine) does not have. `archive(run_dir, dest)` keeps what the tables
and the report read: `config.yaml`, each finished stage's `manifest.json`, the trainers'
`metrics.jsonl` logs, and per stage kind of `KINDS` a `<kind>_rewards.json` (stage tag -> task
id -> rewards, from the store): the evaluations' for the paired differences, the explorations'
for Table 2's task-paired test. `coevo compare` and `coevo report` read an archive as they read
its run; only what needs the episodes (the report's example episodes) is missing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from coevo.store import Store, StoreError, store_path

__all__ = ["KINDS", "archive", "finished_stages", "rewards_file", "stage_rewards", "task_rewards"]

KINDS = ("eval", "explore")
"""The stage kinds whose rewards per task an archive keeps, each in `<kind>_rewards.json`."""


def rewards_file(kind: str) -> str:
    """Where an archive keeps the rewards per task of its `kind` stages."""
    return f"{kind}_rewards.json"


def finished_stages(run_dir: str | Path) -> int:
    """How many stages of the run (or archive) have a manifest: how far it got."""
    return sum(1 for _ in (Path(run_dir) / "stages").glob("*/manifest.json"))


def stage_rewards(
    run_dir: str | Path, kind: str = "eval", stage: str | None = None
) -> dict[str, dict[str, list[float]]]:
    """Stage tag (`eval-1-test_unseen`, `explore-2-failure`) -> task id -> rewards of the run's
    `kind` stages (one of `KINDS`), from its store, or from the archive's `<kind>_rewards.json`
    where there is no store; only `stage`'s when one is named; empty if neither can be read
    (an archive from before explorations were kept has no `explore_rewards.json`)."""
    if kind not in KINDS:
        raise ValueError(f"Unknown stage kind {kind!r}: use one of {', '.join(KINDS)}.")
    run_dir, prefix = Path(run_dir), f"{kind}-"
    if store_path(run_dir).is_file():
        try:
            with Store(run_dir, readonly=True) as store:
                stages = [stage] if stage else store.stages()
                return {tag: store.task_rewards(tag) for tag in stages if tag.startswith(prefix)}
        except StoreError:
            return {}
    try:
        data = json.loads((run_dir / rewards_file(kind)).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(tag): {str(task): [float(r) for r in rewards] for task, rewards in tasks.items()}
        for tag, tasks in data.items()
        if (stage is None or tag == stage) and _well_formed(tasks)
    }


def _well_formed(tasks: object) -> bool:
    """Whether a stage's entry in a `<kind>_rewards.json` maps task ids to lists of numbers."""
    return isinstance(tasks, dict) and all(
        isinstance(rewards, list) and all(isinstance(r, int | float) for r in rewards)
        for rewards in tasks.values()
    )


def task_rewards(run_dir: str | Path, stage: str) -> dict[str, list[float]]:
    """Task id -> rewards of one stage tag of a kind in `KINDS` (see `stage_rewards`)."""
    return stage_rewards(run_dir, stage.split("-", 1)[0], stage).get(stage, {})


def archive(run_dir: str | Path, dest: str | Path) -> Path:
    """Write the archive of `run_dir` (a run, or an archive) to `dest`, replacing what was there
    only once the new one is whole; returns `dest`."""
    run_dir, dest = Path(run_dir), Path(dest)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} is not a coevo run directory (no config.yaml).")
    if dest.resolve() == run_dir.resolve():
        raise ValueError(f"cannot archive {str(run_dir)!r} onto itself.")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    shutil.copyfile(run_dir / "config.yaml", partial / "config.yaml")
    stages = run_dir / "stages"
    kept = [*stages.glob("*/manifest.json"), *stages.rglob("metrics.jsonl")]
    for path in kept:
        if "checkpoints" in path.relative_to(stages).parts:
            continue  # a trainer's resumable state: the stage's own log is kept beside it
        target = partial / "stages" / path.relative_to(stages)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    for kind in KINDS:
        rewards = stage_rewards(run_dir, kind)
        text = json.dumps(rewards, sort_keys=True, separators=(",", ":"))
        (partial / rewards_file(kind)).write_text(text)
    old = dest.with_name(dest.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    partial.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    return dest
