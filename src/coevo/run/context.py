"""What the stages of one run share, and the handle on the model one stage hands the next.

A run is one recipe in one run directory. Its stages go through the run's `Pipeline`, so each
happens once per directory: a rerun skips it and reads its record back from the manifest
(`coevo.run.records`), and a stage cut off by a kill runs again and resumes from what it stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from coevo.envs.pool import EnvPool
from coevo.envs.workers import RayEnvPool
from coevo.run.pipeline import Pipeline
from coevo.run.processes import Processes, ProcessesError
from coevo.run.recipe import RunConfig
from coevo.store import Store
from coevo.trajectory import Task

VALID = "valid"


class _Record(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Record)


@dataclass
class StageModel:
    """A model one stage hands the next: its checkpoint directory, always written by the end of
    the stage that made it, and the module itself while it is still in memory.

    Only the run's newest model is kept in memory (`Run.hand_on`); any other is loaded from
    `path` by whoever needs it, with the same weights. A stage that was done before hands on
    the path alone.
    """

    path: Path
    module: Any = None
    """The trained torch module (None: load it from `path`)."""

    def take(self) -> Any:
        """What a trainer starts from: the module, handed over (a trainer changes it in place,
        so the handle lets go of it), or the directory."""
        module, self.module = self.module, None
        return module if module is not None else self.path


@dataclass
class Run:
    """What the stages of one run share: its recipe, pipeline, store and env pool."""

    config: RunConfig
    pipeline: Pipeline
    store: Store
    pool: EnvPool | RayEnvPool
    processes: Processes = field(default_factory=Processes)
    """This process's place under `accelerate launch` (one process: the main one)."""
    _held: StageModel | None = field(default=None, repr=False)

    @property
    def dir(self) -> Path:
        return self.pipeline.run_dir

    def tasks(self, split: str) -> list[Task]:
        """The run's tasks of `split`; `valid` is the tail of the env's train split, which
        the run never trains on (settings are chosen there, not on the test splits)."""
        cfg = self.config.env
        env = self.pool.acquire()
        try:
            tasks = env.tasks("train" if split == VALID else split)
        finally:
            self.pool.release(env)
        if split in ("train", VALID):
            held = len(tasks) - cfg.valid_tasks
            if split == VALID:
                return tasks[held:]
            tasks = tasks[:held]
        limit = cfg.train_tasks if split == "train" else cfg.eval_tasks
        return tasks[:limit] if limit is not None else tasks

    def stage(
        self,
        name: str,
        fn: Callable[[Path], R],
        read: Callable[[dict[str, Any]], R],
        inputs: dict[str, Any] | None = None,
        *,
        everyone: bool = False,
    ) -> R:
        """Run stage `name` (`fn(stage_dir)` -> its record) unless it finished before; its
        record either way (`read` turns a manifest's outputs back into one).

        With several processes (`coevo.run.processes`) the main one runs and records the
        stage; the others run `fn` too when `everyone` (training, rollouts: `fn` splits the
        work) and otherwise wait, then all read the main process's record.
        """
        procs = self.processes
        if procs.count == 1:
            return read(self.pipeline.stage(name, lambda out: fn(out).to_dict(), inputs))
        # The main process's view of what is done, so every process takes the same branch.
        done = procs.from_main(self.pipeline.done(name))
        if procs.main:
            outputs = self.pipeline.stage(name, lambda out: fn(out).to_dict(), inputs)
        elif everyone and not done:
            fn(self.pipeline.stage_dir(name))
        procs.barrier(f"stage {name}")  # its manifest and stored rows are written
        if not procs.main:
            record = self.pipeline.manifest(name)
            if record is None:  # read after the main process wrote it: never expected
                raise ProcessesError(
                    f"Process {procs.rank} found no record of stage {name} after the main "
                    f"process finished it ({self.pipeline.run_dir / 'stages' / name})."
                )
            outputs = record["outputs"]
        return read(outputs)

    def hand_on(self, path: Path, module: Any = None) -> StageModel:
        """The handle on a stage's model; the model handed on before leaves memory (keeping
        every agent's model would hold several copies of a large model at once)."""
        if self._held is not None:
            self._held.module = None
        self._held = StageModel(path, module)
        return self._held
