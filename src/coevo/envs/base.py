"""The Env contract, its step bookkeeping and the registry of environments.

An env is Gymnasium-shaped with text in and text out:

    observation, info = env.reset(task, seed=None)
    result = env.step("Thought: ... Action: search[red shoes]")   # -> StepResult

`step` takes the agent's whole reply (or a bare action) and parses it with `coevo.envs.react`.
`reward` is 0 until the episode ends, then the final task score in [0, 1]. `terminated` is the
task's own end (bought, submitted, solved); `truncated` is the step budget running out. Bad
actions never raise: they return an observation saying what was wrong and use up a step.
Stepping a finished episode raises `EpisodeFinishedError`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from coevo.envs.options import OptionError, check_options
from coevo.trajectory import Task, Turn

SPLITS: tuple[str, ...] = ("train", "test_seen", "test_unseen")


class EnvError(Exception):
    """A user-facing problem with an environment: the message names the thing and the fix."""


class EpisodeFinishedError(EnvError, RuntimeError):
    """`step` was called after the episode ended; call `reset` first."""


class NoEpisodeError(EnvError, RuntimeError):
    """`step` was called before any `reset`."""


class NoDemonstrationError(EnvError):
    """The task is listed but its env has no expert demonstration for it (e.g. a ScienceWorld
    gold path longer than the type's step budget). A fact of the task list, not a broken env:
    methods leave such tasks out of the expert data and the checker reports them apart."""


@dataclass(frozen=True)
class StepResult:
    """What one `step` returns (Gymnasium's five-tuple, named)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@runtime_checkable
class Env(Protocol):
    """A text environment with tasks, an expert and a step budget."""

    name: str
    instruction_prompt: str
    """How the agent is told the task format and the action grammar."""
    max_steps: int

    def tasks(self, split: str) -> list[Task]: ...

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> StepResult: ...

    def expert(self, task: Task) -> list[Turn]:
        """The assistant turns of a demonstration that solves `task` (reward 1.0)."""
        ...

    def close(self) -> None: ...


class EpisodeClock:
    """Step bookkeeping every env shares: counts steps, applies the budget, guards the end.

    Usage inside an env: `clock.start()` in `reset`; `clock.tick()` at the top of `step`
    (raises when the episode is over, returns the 1-based step number); `clock.finish(...)`
    with whether the task ended, which returns `truncated` and closes the episode when done.
    """

    def __init__(self, max_steps: int) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}.")
        self.max_steps = max_steps
        self.steps = 0
        self._state = "idle"  # idle -> running -> finished

    def start(self) -> None:
        self.steps = 0
        self._state = "running"

    @property
    def running(self) -> bool:
        return self._state == "running"

    def tick(self) -> int:
        if self._state == "idle":
            raise NoEpisodeError("step() was called before reset(task): start an episode first.")
        if self._state == "finished":
            raise EpisodeFinishedError(
                f"The episode is over (after {self.steps} steps): call reset(task) before "
                "stepping again."
            )
        self.steps += 1
        return self.steps

    def finish(self, terminated: bool) -> bool:
        """Close the episode if it ended; return whether the step budget truncated it."""
        truncated = not terminated and self.steps >= self.max_steps
        if terminated or truncated:
            self._state = "finished"
        return truncated


# name -> factory, or "module:attribute" imported on first use so optional extras
# (scienceworld, bfcl-eval) are only needed by the env that uses them.
_REGISTRY: dict[str, Callable[..., Env] | str] = {
    "shop": "coevo.envs.shop:ShopEnv",
    "sql": "coevo.envs.sql:SqlEnv",
    "sciworld": "coevo.envs.sciworld:SciWorldEnv",
    "bfcl": "coevo.envs.bfcl:BfclEnv",
}


def register(name: str, factory: Callable[..., Env] | str) -> None:
    """Make `make(name, ...)` build envs with `factory` (a callable or "module:attribute")."""
    _REGISTRY[name] = factory


def names() -> list[str]:
    return sorted(_REGISTRY)


def factory(name: str) -> Callable[..., Env] | str:
    """What `make(name)` builds with: a callable, or "module:attribute" imported on first use."""
    if name not in _REGISTRY:
        raise EnvError(f"Unknown env {name!r}. Registered envs: {', '.join(names())}.")
    return _REGISTRY[name]


def _load(target: str) -> Callable[..., Env]:
    module_name, _, attr = target.partition(":")
    if not attr:
        raise EnvError(f"{target!r} is not of the form 'package.module:EnvClass'.")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise EnvError(f"Cannot import {module_name!r} for env {target!r}: {exc}.") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise EnvError(f"Module {module_name!r} has no {attr!r}.") from exc


def make(name: str, **options: Any) -> Env:
    """Build a registered env by name (or a user's env by "package.module:EnvClass")."""
    factory = _REGISTRY.get(name)
    if factory is None:
        if ":" in name:
            factory = name
        else:
            raise EnvError(
                f"Unknown env {name!r}. Registered envs: {', '.join(names())}; a user env "
                "can be named as 'package.module:EnvClass' or added with "
                "coevo.envs.register(name, factory)."
            )
    if isinstance(factory, str):
        factory = _load(factory)
    try:
        options = check_options(name, factory, options)
    except OptionError as exc:
        raise EnvError(str(exc)) from None
    return factory(**options)


def check_split(split: str) -> str:
    """Return `split` if it is a known split, else raise a clear error."""
    if split not in SPLITS:
        raise EnvError(f"Unknown split {split!r}: use one of {', '.join(SPLITS)}.")
    return split
