"""Stages with manifests: a rerun skips finished stages and resumes the one that was cut.

A run directory holds `config.yaml` (the resolved config), and for each stage a folder
`stages/<name>/` with its outputs and, once the stage finished, `manifest.json` (config hash,
inputs, outputs, finished time). The manifest is written last and atomically (temp file +
rename), so after a kill at any moment a stage either has a manifest (finished, skipped next
time) or not (run again; stages resume from what they stored, e.g. committed trajectories or
trainer checkpoints). A manifest's `seconds` is the stage's time over all its attempts: each
attempt notes in `attempts.json` when it started and, every minute and when it stops, that it
is still running, so an attempt cut off by a kill counts up to its last note.

Folders a stage writes only to resume itself (`scratch`: a trainer's checkpoints, 1.6 GB a
state for SmolLM2-135M) are removed once it finished, since a finished stage never runs again;
a finished stage found with them (a run made before this rule) loses them when it is skipped.

A manifest counts only while what it vouches for is still there: one that is not valid JSON
(a disk that filled up, a hand edit), or one of a stage whose trajectories are gone from the
store (a damaged store moved aside), leaves its stage unfinished, with a one-line warning, and
the stage runs again.

A finished run continues with a recipe that only extends it (`extends`: more iterations, more
RFT rounds, more GRPO steps); a started one resumes with settings that change only its memory
and time (`FREE_KEYS`: activation checkpointing, threads); any other change is refused with
the keys that differ. A run adopting another's start (`init_from`) compares the same way
(`result_settings`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from rich.markup import escape

from coevo.config import upgrade
from coevo.run.console import console
from coevo.run.memory import release_free_memory


class RunDirError(ValueError):
    """The run directory cannot be used: it holds another config's run, or a process holds it."""


def config_hash(config: dict[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def write_atomic(path: Path, text: str) -> None:
    """Write `text` so readers see the old file or the whole new one, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Pipeline:
    """Runs named stages once each in `run_dir`, recording a manifest per finished stage.

    `name` heads every stage line (default: the run directory). A run made with another
    recipe is refused unless the two differ only in `extends` keys, each grown (an integer at
    least as large), or in keys the saved recipe lacks whose new value is their default in
    `defaults` (settings added to coevo since the run was made). A saved recipe is first
    brought up to date by `recipe`, the root dataclass of the recipes (`config.upgrade`: the
    keys it has moved since are read in their new place, those it retired are left out).
    """

    def __init__(
        self,
        run_dir: str | Path,
        config: dict[str, Any],
        *,
        quiet: bool = False,
        name: str | None = None,
        extends: tuple[str, ...] = (),
        defaults: dict[str, Any] | None = None,
        recipe: type | None = None,
        scratch: tuple[str, ...] = (),
    ):
        self.run_dir = Path(run_dir)
        self.scratch = scratch
        self.recipe = recipe
        self.config = config
        self.hash = config_hash(config)
        self.quiet = quiet
        self.name = name or str(self.run_dir)
        self.rows: Callable[[str], int] | None = None
        """Trajectories the store holds for a stage (`Store.stage_rows`); set by the runner."""
        self.finished: Callable[[str], None] | None = None
        """Called with a stage's name once it ran and its manifest is written (not when it is
        skipped); the runner says there how much time the run has left."""
        self.until: tuple[str, ...] = ()
        """Stages after which the run stops: once all are finished, the next stage to run
        raises `Stopped` instead (`coevo run --until`); set by the runner."""
        self._warned: set[str] = set()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        stamp = self.run_dir / "run.json"
        if stamp.exists():
            record = json.loads(stamp.read_text())
            if record.get("config_hash") != self.hash:
                grown = self._check_extension(record.get("config_hash"), extends, defaults or {})
                record.update(config_hash=self.hash, extended=record.get("extended", []) + grown)
                write_atomic(stamp, json.dumps(record))
        else:
            write_atomic(stamp, json.dumps({"config_hash": self.hash, "created": time.time()}))

    def _check_extension(
        self, recorded: str | None, extends: tuple[str, ...], defaults: dict[str, Any]
    ) -> list[str]:
        """The keys that grow when the run's saved recipe is extended to this one; raise
        RunDirError naming the keys that differ when it is not only extended."""
        saved_path = self.run_dir / "config.yaml"
        saved = yaml.safe_load(saved_path.read_text()) if saved_path.is_file() else None
        if isinstance(saved, dict):
            saved = upgrade(saved, self.recipe) if self.recipe is not None else saved
        else:
            raise RunDirError(
                f"{str(self.run_dir)!r} holds a run with another config (hash {recorded}, "
                f"now {self.hash}): resume it with the same config and overrides, or start a "
                "new run with another --out."
            )
        grown, differ = recipe_changes(saved, self.config, extends, _flat(defaults))
        if differ:
            raise RunDirError(
                f"{str(self.run_dir)!r} holds a run with another recipe: {'; '.join(differ)}. "
                "Resume it with its own recipe (its config.yaml), or start a new run with "
                f"another --out (add init_from={str(self.run_dir)!r} to reuse its finished "
                f"stages that the new recipe shares); only {', '.join(extends) or 'no keys'} "
                "may grow to extend a run."
            )
        return grown

    def say(self, stage: str, message: str = "", style: str = "dim") -> None:
        """A line about `stage` of this run, headed by the run's name (unless quiet)."""
        if not self.quiet:
            line = f"{self.name}: stage {stage}" + (f": {message}" if message else "")
            console.print(f"[{style}]{escape(line)}[/]", soft_wrap=True)

    def stage_dir(self, name: str) -> Path:
        path = self.run_dir / "stages" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def manifest(self, name: str) -> dict[str, Any] | None:
        """The record of finished stage `name`, or None when it has to run (again)."""
        path = self.run_dir / "stages" / name / "manifest.json"
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            self._warn(name, f"{path} is not valid JSON ({exc}); the stage runs again")
            return None
        if not isinstance(record, dict) or not isinstance(record.get("outputs"), dict):
            self._warn(name, f"{path} holds no stage outputs; the stage runs again")
            return None
        stored = record.get("store_rows", 0)
        if stored and self.rows is not None and self.rows(name) == 0:
            self._warn(
                name,
                f"the store no longer holds its {stored} trajectories (was it moved aside?); "
                "the stage runs again",
            )
            return None
        return record

    def warn(self, stage: str, message: str) -> None:
        """A warning about `stage` of this run, in yellow; shown even when quiet, since it says
        something went wrong or nothing was learned."""
        line = f"{self.name}: stage {stage}: {message}"
        console.print(f"[yellow]{escape(line)}[/]", soft_wrap=True)

    def _warn(self, name: str, message: str) -> None:
        if name not in self._warned:  # manifest() is read more than once per stage
            self._warned.add(name)
            self.warn(name, message)

    def done(self, name: str) -> bool:
        return self.manifest(name) is not None

    def stage(
        self,
        name: str,
        fn: Callable[[Path], dict[str, Any] | None],
        inputs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run stage `name` unless it finished before; return its recorded outputs."""
        finished = self.manifest(name)
        if finished is not None:
            source = finished.get("adopted_from")
            self.say(name, f"adopted from {source}" if source else "done before, skipped")
            self._clear_scratch(name)
            return finished["outputs"]
        if self.until and all(self.done(stage) for stage in self.until):
            raise Stopped(self.until)
        self.say(name, style="bold")
        with Attempts(self.stage_dir(name) / ATTEMPTS) as attempts:
            outputs = fn(self.stage_dir(name)) or {}
        record = {
            "stage": name,
            "config_hash": self.hash,
            "inputs": inputs or {},
            "outputs": outputs,
            "started": attempts.started,
            "finished": time.time(),
            "seconds": round(attempts.seconds, 3),
            "attempts": len(attempts.times),
        }
        if self.rows is not None:
            record["store_rows"] = self.rows(name)
        write_atomic(
            self.stage_dir(name) / "manifest.json", json.dumps(record, indent=2, default=str)
        )
        (self.stage_dir(name) / ATTEMPTS).unlink(missing_ok=True)  # the manifest has the sum
        self._clear_scratch(name)
        release_free_memory()  # the next stage, and any run beside this one, gets this one's peak
        if self.finished is not None:
            self.finished(name)
        return outputs

    def _clear_scratch(self, name: str) -> None:
        for folder in self.scratch:
            shutil.rmtree(self.run_dir / "stages" / name / folder, ignore_errors=True)


ATTEMPTS = "attempts.json"


class Stopped(Exception):
    """The stages a run was to stop after (`Pipeline.until`) are finished."""


class Attempts:
    """The time a stage has run over all its attempts, kept in `path` across processes.

    Entering notes a new attempt (its start) after those already in the file; while inside,
    a daemon thread notes every `every` seconds that the attempt still runs, and leaving (a
    return, an error, a Ctrl-C) notes it a last time. An attempt killed outright counts up to
    its last note, so at most `every` seconds of it go uncounted. A file that cannot be read
    starts the count afresh; one that cannot be written costs only the count.
    """

    every = 60.0

    def __init__(self, path: Path) -> None:
        self.path = path
        self.times: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Attempts:
        try:
            earlier = json.loads(self.path.read_text())
            self.times = [
                {"started": float(t["started"]), "seen": float(t["seen"])} for t in earlier
            ]
        except (OSError, ValueError, TypeError, KeyError):
            self.times = []
        now = time.time()
        self.times.append({"started": now, "seen": now})
        self._note()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._note()

    @property
    def started(self) -> float:
        return self.times[0]["started"]

    @property
    def seconds(self) -> float:
        return sum(max(t["seen"] - t["started"], 0.0) for t in self.times)

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            self._note()

    def _note(self) -> None:
        self.times[-1]["seen"] = time.time()
        with contextlib.suppress(OSError):  # a full disk must not stop the stage
            write_atomic(self.path, json.dumps(self.times))


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}, values through JSON (a tuple and its YAML list agree)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.loads(json.dumps(value, default=str))
    return out


def recipe_changes(
    saved: dict[str, Any],
    new: dict[str, Any],
    extends: tuple[str, ...],
    defaults: dict[str, Any],
) -> tuple[list[str], list[str]]:
    """(keys in `extends` that grow, "key (saved -> new)" for every other difference) between
    a run's saved recipe and a new one, both nested; `defaults` is flat (dotted keys)."""
    old, now = _flat(saved), _flat(new)
    grown, differ = [], []
    # What the run is (its method, its env) first, then every other key in order.
    for key in sorted(old.keys() | now.keys(), key=lambda k: (_rank(k), k)):
        before, after = old.get(key, _MISSING), now.get(key, _MISSING)
        if before == after or _free(key):
            continue
        if before is _MISSING and key in defaults and after == defaults[key]:
            continue  # a setting added since the run was made, at its default
        if key in extends and _grows(before, after):
            grown.append(key)
            continue
        differ.append(f"{key} ({_show(before)} -> {_show(after)})")
    return grown, differ


def continues(
    saved: dict[str, Any], new: dict[str, Any], extends: tuple[str, ...], defaults: dict[str, Any]
) -> bool:
    """Whether recipe `new` is `saved`, or `saved` grown only in `extends` keys, row label and
    start aside (`name`, `init_from`): a run of it would go on from a run of `saved`.
    `defaults` is nested, as the recipes are."""
    label = dict.fromkeys(("name", "init_from"))
    _, differ = recipe_changes({**saved, **label}, {**new, **label}, extends, _flat(defaults))
    return not differ


_MISSING = object()
_FIRST = ("method", "env.name", "env.", "model.")


def _rank(key: str) -> int:
    """Where `key` comes in a list of differences: the keys that say what a run is first."""
    return next((i for i, head in enumerate(_FIRST) if key.startswith(head)), len(_FIRST))


# Settings that change a run's memory and time, never its results (the trained weights are
# the same, up to float rounding: tests/train/test_sft.py, test_dpo.py), so a started run may
# resume with them changed: e.g. activation checkpointing turned on for a run that ran out of
# memory, DPO's shared prefixes or SFT's packed rows turned off for a model whose attention
# cannot take them, or
# more CPU threads for a run left alone on the machine (threads split the same sums), or
# another decoding loop (greedy and seeded sampled replies equal the eager loop's:
# tests/policy/test_static_decode.py), e.g. eager for a GPU whose graphs fail, or
# compiled decoder layers while training (the losses eager's: tests/train/test_compile.py;
# runs saved with `false` go on under the default `auto`), or
# which checkpoints stay on disk for other runs to start from.
FREE_KEYS = (
    "compute.gradient_checkpointing",
    "compute.compile",
    "checkpoints.keep_stage_ends",
    "dpo.shared_prefix",
    "sft.packing",
    "model.cpu_threads",
    "model.decode",
)


def _free(key: str) -> bool:
    return any(key == k or key.endswith(f".{k}") for k in FREE_KEYS)


def result_settings(tree: dict[str, Any], section: str) -> dict[str, Any]:
    """The dotted settings under `section` of a nested recipe that decide its results: those
    of `FREE_KEYS` left out, so two runs that differ only in them start from the same place."""
    flat = _flat({section: tree.get(section)})
    return {k: v for k, v in flat.items() if not _free(k)}


def _grows(before: Any, after: Any) -> bool:
    return (
        isinstance(before, int)
        and isinstance(after, int)
        and not isinstance(before, bool)
        and after > before
    )


def _show(value: Any) -> str:
    return "absent" if value is _MISSING else json.dumps(value)
