"""The task manifest (tasks, budgets, excluded types, gold verdicts) and the gold-path cache.

Building the task lists needs the JVM: every type's variations, a few gold paths per type (the
genetics types' are the slowest) and every kept task's description. That is minutes of work,
so it is done once per scienceworld version:

1. a manifest shipped in `data/manifest-<version>-<protocol key>.json.gz` (one per way of
   choosing the splits, `eto` or `sampled`), computed with
   `python -m coevo.envs.sciworld --validate` (it also holds the verdict of replaying every
   task's gold path), is used when the installed version matches;
2. otherwise the manifest is built on first use and cached in
   `$COEVO_CACHE/sciworld/<version>/` (default `~/.cache/coevo/sciworld/<version>/`).

Gold action sequences and their replay verdicts found at run time are appended to `gold.jsonl`
in the same cache directory, one JSON object per line, so a killed run loses nothing. A verdict
records the budget it was reached under: when the protocol's budgets change, the cached action
sequences (the expensive part) are replayed under the new budget, not generated again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevo.config import coevo_cache
from coevo.envs.base import EnvError
from coevo.envs.sciworld import eto, protocol
from coevo.envs.sciworld.simulator import Simulator

log = logging.getLogger(__name__)
SHIPPED = Path(__file__).parent / "data"


def protocol_key(splits: str = "eto") -> str:
    """A short hash of the protocol: a changed protocol never reads a stale cache."""
    if splits == "eto":
        fields: dict[str, Any] = {
            "splits": "eto",
            "simplification": protocol.SIMPLIFICATION,
            "max_steps": eto.MAX_STEPS,
            "tasks": {split: eto.variations(split) for split in protocol.SOURCE},
        }
    else:  # the sampled protocol's fields, unchanged since its manifest was shipped
        fields = {
            "simplification": protocol.SIMPLIFICATION,
            "source": protocol.SOURCE,
            "exclude": protocol.EXCLUDE_LONGEST,
            "caps": protocol.CAPS,
            "seed": protocol.SEED,
            "gold_sample": protocol.GOLD_SAMPLE,
            "budget": [protocol.BUDGET_FACTOR, protocol.BUDGET_MIN, protocol.BUDGET_MAX],
        }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


def version_dir(version: str, root: str | Path | None = None) -> Path:
    """Where this scienceworld version's manifest and gold cache live."""
    if root is None:
        return coevo_cache("sciworld") / version
    return Path(root) / "sciworld" / version


def manifest_name(version: str, deterministic: bool = True, splits: str = "eto") -> str:
    """File name of a manifest: its gold lengths depend on the JVM's hashing mode too."""
    mode = "" if deterministic else "-nondeterministic"
    return f"manifest-{version}-{protocol_key(splits)}{mode}.json.gz"


def gold_name(deterministic: bool = True) -> str:
    return "gold.jsonl" if deterministic else "gold-nondeterministic.jsonl"


def read_json_gz(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write_json_gz(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a manifest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    # mtime=0 keeps the bytes identical for identical content (a clean diff when re-shipped).
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    tmp.replace(path)


def load_manifest(
    sim: Simulator,
    root: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    splits: str = "eto",
) -> tuple[dict[str, Any], str]:
    """The manifest for the running simulator's version and where it came from."""
    name = manifest_name(sim.version, sim.deterministic, splits)
    shipped = SHIPPED / name
    if shipped.exists():
        return read_json_gz(shipped), str(shipped)
    cached = version_dir(sim.version, root) / name
    if cached.exists():
        return read_json_gz(cached), str(cached)
    log.warning(
        "No ScienceWorld task manifest for scienceworld %s yet: building it once (minutes) into %s",
        sim.version,
        cached,
    )
    manifest = build_manifest(sim, progress, splits)
    write_json_gz(cached, manifest)
    return manifest, str(cached)


def build_manifest(
    sim: Simulator, progress: Callable[[str], None] | None = None, splits: str = "eto"
) -> dict[str, Any]:
    """Count, measure and sample every task type on the simulator (no gold replay yet)."""
    if splits == "eto":
        return build_eto_manifest(sim, progress)
    say = progress or (lambda _: None)
    stats: list[protocol.TypeStats] = []
    for name in sim.task_names():
        say(f"variations and gold paths of {name}")
        variations = sim.variations(name)
        sample = protocol.gold_sample(variations["train"], name=name)
        lengths = tuple(len(sim.gold_actions(name, v, protocol.SIMPLIFICATION)) for v in sample)
        stats.append(
            protocol.TypeStats(name, lengths, {k: tuple(v) for k, v in variations.items()})
        )
    excluded = set(protocol.longest_types(stats))
    types: dict[str, Any] = {}
    tasks: list[dict[str, Any]] = []
    for s in stats:
        types[s.name] = {
            "gold_sample": protocol.gold_sample(list(s.variations["train"]), name=s.name),
            "gold_lengths": list(s.gold_lengths),
            "median_gold": s.median_gold,
            "budget": protocol.budget(s.gold_lengths),
            "variations": {k: len(v) for k, v in s.variations.items()},
            "excluded": (
                f"one of the {protocol.EXCLUDE_LONGEST} longest task types (median gold path "
                f"{s.median_gold:g} steps)"
                if s.name in excluded
                else None
            ),
        }
    for split, source in protocol.SOURCE.items():
        for s in stats:
            if s.name in excluded:
                continue
            kept = protocol.sample_split(
                s.variations[source], protocol.CAPS[split], split=split, name=s.name
            )
            for variation in kept:
                say(f"{split}: {s.name} {variation}")
                tasks.append(task_row(sim, split, s.name, variation))
    return {
        "scienceworld": sim.version,
        "protocol_key": protocol_key("sampled"),
        "protocol": {
            "simplification": protocol.SIMPLIFICATION,
            "caps": protocol.CAPS,
            "seed": protocol.SEED,
            "gold_sample": protocol.GOLD_SAMPLE,
            "exclude_longest": protocol.EXCLUDE_LONGEST,
        },
        "types": types,
        "tasks": tasks,
        "gold": {},
    }


def build_eto_manifest(
    sim: Simulator, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """ETO's task lists and budgets on the simulator: each task's description, each type's
    variation counts; the types ETO leaves out are marked excluded."""
    say = progress or (lambda _: None)
    types: dict[str, Any] = {}
    for name in sim.task_names():
        say(f"variations of {name}")
        variations = sim.variations(name)
        # ETO's train list also draws on the package's dev variations (see eto.py), so a
        # variation only has to exist.
        known = {v for vs in variations.values() for v in vs}
        for split in protocol.SOURCE:
            missing = sorted(set(eto.variations(split).get(name, ())) - known)
            if missing:
                raise EnvError(
                    f"ETO's {split} list has {name} variations {missing} that scienceworld "
                    f"{sim.version} does not have."
                )
        budget = eto.MAX_STEPS.get(name)
        types[name] = {
            "gold_sample": [],
            "gold_lengths": [],
            "median_gold": None,
            "budget": budget,
            "variations": {k: len(v) for k, v in variations.items()},
            "excluded": None if budget is not None else "not in ETO's task lists",
        }
    unknown = sorted(set(eto.MAX_STEPS) - set(types))
    if unknown:
        raise EnvError(f"scienceworld {sim.version} has no task types {unknown} (ETO's).")
    tasks = []
    for split in protocol.SOURCE:
        for name, variations in eto.variations(split).items():
            for variation in variations:
                say(f"{split}: {name} {variation}")
                tasks.append(task_row(sim, split, name, variation))
    return {
        "scienceworld": sim.version,
        "protocol_key": protocol_key("eto"),
        "protocol": {"splits": "eto", "simplification": protocol.SIMPLIFICATION},
        "types": types,
        "tasks": tasks,
        "gold": {},
    }


def task_row(sim: Simulator, split: str, name: str, variation: int) -> dict[str, Any]:
    """A manifest's task entry; loads the variation for its description."""
    sim.load(name, variation, protocol.SIMPLIFICATION)
    return {
        "id": f"sciworld/{split}/{name}-{variation}",
        "split": split,
        "task_name": name,
        "variation": variation,
        "instruction": clean_description(sim.task_description()),
    }


def clean_description(text: str) -> str:
    """The task description without the simulator's "Task Description:" header."""
    text = text.strip()
    head = "Task Description:"
    return text[len(head) :].strip() if text.startswith(head) else text


@dataclass(frozen=True)
class GoldRecord:
    """A task's gold action sequence and whether replaying it scored 1.0."""

    id: str
    actions: tuple[str, ...]
    valid: bool
    reward: float
    steps: int
    reason: str | None = None
    budget: int | None = None
    """The step budget the verdict was reached under; another budget means another replay."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "actions": list(self.actions),
            "valid": self.valid,
            "reward": self.reward,
            "steps": self.steps,
            "reason": self.reason,
            "budget": self.budget,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GoldRecord:
        return cls(
            id=str(d["id"]),
            actions=tuple(str(a) for a in d["actions"]),
            valid=bool(d["valid"]),
            reward=float(d["reward"]),
            steps=int(d["steps"]),
            reason=d.get("reason"),
            budget=d.get("budget"),
        )


class GoldCache:
    """Append-only JSONL of gold records; the last record of a task id wins."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writes = 0
        """Bumped by every `put`, so readers know when their derived lists are stale."""
        self._records: dict[str, GoldRecord] = {}
        if path.exists():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    record = GoldRecord.from_dict(json.loads(line))
                    self._records[record.id] = record
                except (ValueError, KeyError, TypeError):
                    # A line cut by a crash mid-write: that task is simply checked again.
                    log.warning("%s:%d is not a gold record; ignoring it", path, number)

    def get(self, task_id: str) -> GoldRecord | None:
        return self._records.get(task_id)

    def invalid_ids(self) -> set[str]:
        return {k for k, r in self._records.items() if not r.valid}

    def put(self, record: GoldRecord) -> None:
        self._records[record.id] = record
        self.writes += 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write() on an O_APPEND descriptor: lines from concurrent processes (a validation
        # run next to a training run) never interleave.
        line = (json.dumps(record.to_dict()) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
