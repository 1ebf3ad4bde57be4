"""Stages with manifests: a rerun skips finished stages and resumes the one that was cut.

A run directory holds `config.yaml` (the resolved config), and for each stage a folder
`stages/<name>/` with its outputs and, once the stage finished, `manifest.json` (config hash,
inputs, outputs, finished time). The manifest is written last and atomically (temp file +
rename), so after a kill at any moment a stage either has a manifest (finished, skipped next
time) or not (run again; stages resume from what they stored, e.g. committed trajectories or
trainer checkpoints).

A manifest counts only while what it vouches for is still there: one that is not valid JSON
(a disk that filled up, a hand edit), or one of a stage whose trajectories are gone from the
store (a damaged store moved aside), leaves its stage unfinished, with a one-line warning, and
the stage runs again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)


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
    """Runs named stages once each in `run_dir`, recording a manifest per finished stage."""

    def __init__(self, run_dir: str | Path, config: dict[str, Any], *, quiet: bool = False):
        self.run_dir = Path(run_dir)
        self.config = config
        self.hash = config_hash(config)
        self.quiet = quiet
        self.rows: Callable[[str], int] | None = None
        """Trajectories the store holds for a stage (`Store.stage_rows`); set by the runner."""
        self._warned: set[str] = set()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        stamp = self.run_dir / "run.json"
        if stamp.exists():
            recorded = json.loads(stamp.read_text()).get("config_hash")
            if recorded != self.hash:
                raise RunDirError(
                    f"{str(self.run_dir)!r} holds a run with another config (hash {recorded}, "
                    f"now {self.hash}): resume it with the same config and overrides "
                    "(its config.yaml), or start a new run with another --out."
                )
        else:
            write_atomic(stamp, json.dumps({"config_hash": self.hash, "created": time.time()}))

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

    def _warn(self, name: str, message: str) -> None:
        if name not in self._warned:  # manifest() is read more than once per stage
            self._warned.add(name)
            console.print(f"[yellow]stage {escape(name)}: {escape(message)}[/]", soft_wrap=True)

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
            if not self.quiet:
                console.print(f"[dim]stage {name}: done before, skipped[/]")
            return finished["outputs"]
        if not self.quiet:
            console.print(f"[bold]stage {name}[/]")
        start = time.time()
        outputs = fn(self.stage_dir(name)) or {}
        record = {
            "stage": name,
            "config_hash": self.hash,
            "inputs": inputs or {},
            "outputs": outputs,
            "started": start,
            "finished": time.time(),
            "seconds": round(time.time() - start, 3),
        }
        if self.rows is not None:
            record["store_rows"] = self.rows(name)
        write_atomic(
            self.stage_dir(name) / "manifest.json", json.dumps(record, indent=2, default=str)
        )
        return outputs
