"""Reusable env instances (`EnvPool`), which the rollout loop takes its envs from: the seam
where env workers in other processes can plug in."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from coevo.envs.base import Env


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
