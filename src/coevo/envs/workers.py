"""Env workers on Ray (`rollout.workers: N`): envs live in N worker processes, stepped in parallel.

`RayEnvPool` is a drop-in `EnvPool`: `acquire` hands out a `RemoteEnv`, a stand-in that
forwards every Env call to the worker holding the real env, so the run's other users of the
pool (task lists, expert demonstrations, model init) work unchanged. The rollout loop calls
`reset_all` and `step_all` instead of stepping envs one by one: each worker gets one call with
its share of the batch, and the workers run their shares at the same time.

A worker process that dies takes only its envs with it: calls on them raise `WorkerLost`, the
pool starts a fresh worker in its place, and the rollout loop replays the lost episodes there
(`coevo.rollout`). Ray does the processes, scheduling and transport (`ray.remote` actors);
`rollout.ray_address` joins an existing cluster instead of starting a local one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

from coevo.config import ConfigError
from coevo.envs.base import Env, StepResult
from coevo.envs.pool import WorkerLost, attempt
from coevo.trajectory import Task

RAY_MISSING = (
    "rollout.workers needs Ray, which is not installed: pip install 'coevo[ray]' "
    "(or set rollout.workers: 0 to step the envs in this process)."
)


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


class EnvWorker:
    """The body of one worker process: envs by slot number, made by `factory` on demand.

    Env exceptions come back as values, one per call, so one broken env does not fail its
    neighbours' steps in the same batch (the rollout loop ends only that episode).
    """

    def __init__(self, factory: Callable[[], Env]) -> None:
        self.factory = factory
        self.envs: dict[int, Env] = {}

    def pid(self) -> int:
        return os.getpid()

    def make(self, slot: int) -> tuple[str, str, int]:
        env = self.envs[slot] = self.factory()
        return env.name, env.instruction_prompt, env.max_steps

    def reset_many(self, calls: list[tuple[int, Task, int | None]]) -> list[Any]:
        return [attempt(self.envs[s].reset, task, seed=seed) for s, task, seed in calls]

    def step_many(self, calls: list[tuple[int, str]]) -> list[Any]:
        return [attempt(self.envs[s].step, action) for s, action in calls]

    def call(self, slot: int, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        value = getattr(self.envs[slot], name)
        return value(*args, **kwargs) if callable(value) else value

    def close(self, slot: int) -> None:
        env = self.envs.pop(slot, None)
        if env is not None:
            env.close()


class RemoteEnv:
    """An env that lives in a worker: the Env contract, each call a round trip to the worker."""

    def __init__(self, pool: RayEnvPool, worker: int, slot: int, made: tuple[str, str, int]):
        self.pool, self.worker, self.slot = pool, worker, slot
        # Fixed for the env's life and read every episode: kept here, not asked for each time.
        self.name, self.instruction_prompt, self.max_steps = made

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return _raised(self.pool.reset_all([(self, task, seed)])[0])

    def step(self, action: str) -> StepResult:
        return _raised(self.pool.step_all([(self, action)])[0])

    def tasks(self, split: str) -> list[Task]:
        return self.pool.call(self, "tasks", split)

    def expert(self, task: Task) -> Any:
        return self.pool.call(self, "expert", task)

    def close(self) -> None:
        self.pool.discard(self)

    def __getattr__(self, name: str) -> Any:
        # Anything else an env offers (an env's own extras), looked up in the worker.
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)


class _Method:
    def __init__(self, env: RemoteEnv, name: str) -> None:
        self.env, self.name = env, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.env.pool.call(self.env, self.name, *args, **kwargs)


def _raised(outcome: Any) -> Any:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


class RayEnvPool:
    """An `EnvPool` whose envs live in `workers` Ray actors; new envs go to the least-loaded
    worker, so a batch's episodes spread evenly over the processes."""

    def __init__(
        self, factory: Callable[[], Env], workers: int, *, address: str | None = None
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}.")
        ray = require_ray()
        self._ray = ray
        # A Ray this pool started is its to stop; one the caller started (or a cluster) is not.
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            local = {"num_cpus": workers} if address is None else {}
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **local)
        self._actor_class = ray.remote(num_cpus=1)(EnvWorker)
        self.factory = factory
        self._workers = [self._actor_class.remote(factory) for _ in range(workers)]
        self._free: list[RemoteEnv] = []
        self._all: list[RemoteEnv] = []
        self._slots = itertools.count()

    # The EnvPool interface.

    def acquire(self) -> RemoteEnv:
        if self._free:
            return self._free.pop()
        load = [sum(e.worker == w for e in self._all) for w in range(len(self._workers))]
        worker = load.index(min(load))
        slot = next(self._slots)
        try:
            made = self._get(worker, self._workers[worker].make.remote(slot))
        except WorkerLost:  # it had died: its fresh replacement makes the env
            made = self._get(worker, self._workers[worker].make.remote(slot))
        env = RemoteEnv(self, worker, slot, made)
        self._all.append(env)
        return env

    def release(self, env: RemoteEnv) -> None:
        if env in self._all:  # not one its dead worker took with it
            self._free.append(env)

    def discard(self, env: RemoteEnv) -> None:
        if env not in self._all:
            return
        self._all.remove(env)
        if env in self._free:
            self._free.remove(env)
        # A broken env may fail to close too; it is dropped either way.
        with contextlib.suppress(Exception):
            self._ray.get(self._workers[env.worker].close.remote(env.slot))

    @property
    def size(self) -> int:
        return len(self._all)

    def close(self) -> None:
        for env in list(self._all):
            self.discard(env)
        for actor in self._workers:
            self._ray.kill(actor)
        self._workers.clear()
        if self._owns_ray:
            self._ray.shutdown()

    def __enter__(self) -> RayEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Batched calls: one per worker, all workers at once.

    def reset_all(self, calls: Sequence[tuple[RemoteEnv, Task, int | None]]) -> list[Any]:
        """Reset each env; per call the (observation, info), the env's exception or WorkerLost."""
        return self._fan_out("reset_many", [(e, (e.slot, t, s)) for e, t, s in calls])

    def step_all(self, calls: Sequence[tuple[RemoteEnv, str]]) -> list[Any]:
        """Step each env; per call the StepResult, the env's exception or WorkerLost."""
        return self._fan_out("step_many", [(e, (e.slot, a)) for e, a in calls])

    def call(self, env: RemoteEnv, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._get(
            env.worker, self._workers[env.worker].call.remote(env.slot, name, args, kwargs)
        )

    def worker_pids(self) -> list[int]:
        """The process id of each worker (what a test kills)."""
        return [self._ray.get(w.pid.remote()) for w in self._workers]

    def _fan_out(self, method: str, calls: list[tuple[RemoteEnv, tuple]]) -> list[Any]:
        out: list[Any] = [None] * len(calls)
        by_worker: dict[int, list[int]] = {}
        for i, (env, _) in enumerate(calls):
            if env in self._all:
                by_worker.setdefault(env.worker, []).append(i)
            else:  # its worker died before: the env is gone
                out[i] = WorkerLost(f"env worker {env.worker} died before")
        # All submitted before any is waited on: the workers run their shares in parallel.
        pending = {
            w: getattr(self._workers[w], method).remote([calls[i][1] for i in idx])
            for w, idx in by_worker.items()
        }
        for w, ref in pending.items():
            try:
                answers = self._get(w, ref)
            except WorkerLost as lost:
                answers = [lost] * len(by_worker[w])
            for i, answer in zip(by_worker[w], answers, strict=True):
                out[i] = answer
        return out

    def _get(self, worker: int, ref: Any) -> Any:
        """Wait for `ref`; if its worker died, replace the worker and raise WorkerLost."""
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayActorError as exc:
            self._replace(worker)
            raise WorkerLost(f"env worker {worker} died ({type(exc).__name__})") from None

    def _replace(self, worker: int) -> None:
        # Its envs went with it: forget them, and start an empty worker in its place.
        self._all = [e for e in self._all if e.worker != worker]
        self._free = [e for e in self._free if e.worker != worker]
        self._ray.kill(self._workers[worker])
        self._workers[worker] = self._actor_class.remote(self.factory)
