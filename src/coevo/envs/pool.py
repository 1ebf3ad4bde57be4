"""Reusable env instances (`EnvPool`), which the rollout loop takes its envs from: the seam
where env workers in other processes plug in (`coevo.envs.workers.RayEnvPool`, same interface).

The rollout loop resets and steps a whole batch through `reset_all` and `step_all`: here one env
after another, in the Ray pool one call per worker process, the processes in parallel."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from coevo.envs.base import Env, StepResult
from coevo.trajectory import Task


class WorkerLost(RuntimeError):
    """The process holding an env died: its live episodes are gone, the env with them."""


class EnvPool:
    """Env instances made by `factory` on demand and reused across episodes and rollouts.

    Some envs are costly to start (ScienceWorld starts a JVM), so a pool hands a released env
    to the next episode. An env that raised is discarded rather than reused.
    """

    def __init__(self, factory: Callable[[], Env]) -> None:
        self.factory = factory
        self._free: list[Env] = []
        self._all: list[Env] = []

    def acquire(self) -> Env:
        if self._free:
            return self._free.pop()
        env = self.factory()
        self._all.append(env)
        return env

    def release(self, env: Env) -> None:
        self._free.append(env)

    def discard(self, env: Env) -> None:
        self._all = [e for e in self._all if e is not env]
        # A broken env may fail to close too; it is dropped either way.
        with contextlib.suppress(Exception):
            env.close()

    def reset_all(self, calls: Sequence[tuple[Env, Task, int | None]]) -> list[Any]:
        """Reset each env; per call the (observation, info) or the exception it raised."""
        return [attempt(env.reset, task, seed=seed) for env, task, seed in calls]

    def step_all(self, calls: Sequence[tuple[Env, str]]) -> list[StepResult | Exception]:
        """Step each env; per call the StepResult or the exception it raised."""
        return [attempt(env.step, action) for env, action in calls]

    @property
    def size(self) -> int:
        return len(self._all)

    def close(self) -> None:
        for env in self._all:
            env.close()
        self._all.clear()
        self._free.clear()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, or the exception it raised: returned, not raised, so one broken
    env ends its own episode and not its batch's."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        return exc
