"""What an env offers agent-data co-evolution, beyond the Env contract: optional capabilities.

- `action_pattern(action) -> str`: the kind of an action, for the rare-action signal
  (default: the action's first word, lower-cased);
- `exploration_task(task, context, key) -> Task`: a goal-free exploration episode started from
  a weak task (default: the task's own start, its instruction replaced by the exploration
  context, so the explorer never sees the goal and the episode's reward is not used);
- `tasks_from_exploration(trajectory) -> list[Candidate]`: the candidate tasks a recorded
  exploration yields (no default: each env knows what a task of its own is);
- `task_key(task) -> str`: what makes two tasks the same task, for the duplicate and test
  checks (default: the instruction's words);
- `valid_actions() -> list[str]`: the replies an explorer may send in the env's current
  episode, each `Thought: ...\nAction: ...` (`react.format_reply`) with an action the env
  accepts now and a thought saying what it is for (sql: `Task: <question>` for a query): the
  action space of the `random` and `guided` explorers (no default: only the env knows what
  is valid in its state);
- `TEXT_DEDUP` (a module constant, or an env attribute `text_dedup`): False when the key alone
  tells tasks apart and similar instructions do not make duplicates (ScienceWorld's
  variations differ by a word or two of a generated description).

Each is looked up on the env object first (a user's env, or a method an env already has), then
in the built-in env's module `coevo.envs.<name>.evolve` as a free function taking the env.
The Env protocol stays small; an env without a needed capability gets one clear error.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from coevo.envs.base import Env, EnvError
from coevo.envs.react import parse
from coevo.trajectory import Task, Trajectory

BUILT_IN = ("shop", "sql", "sciworld", "bfcl")


@dataclass(frozen=True)
class Candidate:
    """A task synthesized from an exploration, before verification."""

    task: Task
    origin: dict[str, Any] = field(default_factory=dict)
    """What in the exploration it came from (the bought product, the executed query, ...)."""


def _find(env: Env, name: str) -> Callable[..., Any] | None:
    method = getattr(env, name, None)
    if callable(method):
        return method
    env_name = getattr(env, "name", "")
    if env_name in BUILT_IN:
        module = importlib.import_module(f"coevo.envs.{env_name}.evolve")
        fn = getattr(module, name, None)
        if fn is not None:
            return lambda *args: fn(env, *args)
    return None


def first_word(action: str) -> str:
    """The default action pattern: the action's first word, before any bracket or paren."""
    head = action.strip().split(maxsplit=1)
    word = head[0] if head else ""
    for mark in ("[", "("):
        word = word.split(mark, 1)[0]
    return word.lower()


def action_pattern(env: Env) -> Callable[[str], str]:
    return _find(env, "action_pattern") or first_word


def exploration_task(env: Env, task: Task, context: str, key: str) -> Task:
    """The task an exploration episode plays (always of the train split)."""
    fn = _find(env, "exploration_task")
    if fn is not None:
        return fn(task, context, key)
    return replace(task, id=f"explore/{key}/{task.id}", split="train", instruction=context)


def require(env: Env, *, walk: bool = False) -> None:
    """Raise the clear error now if `env` cannot turn explorations into tasks, or (`walk`:
    the random and guided explorers) cannot say which actions are valid."""
    if _find(env, "tasks_from_exploration") is None:
        raise EnvError(
            f"Env {getattr(env, 'name', env)!r} cannot turn explorations into tasks: give it a "
            "tasks_from_exploration(trajectory) method (coevo.envs.evolve) to use agent_data."
        )
    if walk:
        _lister(env)


def _lister(env: Env) -> Callable[[], list[str]]:
    fn = _find(env, "valid_actions")
    if fn is None:
        raise EnvError(
            f"Env {getattr(env, 'name', env)!r} cannot list its valid actions, which the random "
            "and guided explorers choose from: give it a valid_actions() method "
            "(coevo.envs.evolve), or use agent_data.explorer.kind=llm."
        )
    return fn


def valid_actions(env: Env) -> list[str]:
    """The replies the env accepts in its current episode (see the module docstring)."""
    return list(_lister(env)())


def tasks_from_exploration(env: Env, trajectory: Trajectory) -> list[Candidate]:
    require(env)
    fn = _find(env, "tasks_from_exploration")
    assert fn is not None
    return list(fn(trajectory))


def text_dedup(env: Env) -> bool:
    """Whether near-identical instructions count as the same task (default: yes)."""
    value = getattr(env, "text_dedup", None)
    if value is None and getattr(env, "name", "") in BUILT_IN:
        module = importlib.import_module(f"coevo.envs.{env.name}.evolve")
        value = getattr(module, "TEXT_DEDUP", None)
    return True if value is None else bool(value)


def task_key(env: Env, task: Task) -> str:
    fn = _find(env, "task_key")
    if fn is not None:
        return str(fn(task))
    return " ".join(task.instruction.lower().split())


def agent_actions(trajectory: Trajectory) -> list[tuple[str, str, str]]:
    """(thought, action, the observation that followed or '') of each agent turn with an
    action, in order: what the synthesis functions read an exploration from."""
    turns = trajectory.turns
    out = []
    for i, turn in enumerate(turns):
        if turn.role != "assistant":
            continue
        parsed = parse(turn.text)
        if not parsed.ok:
            continue
        after = turns[i + 1].text if i + 1 < len(turns) and turns[i + 1].role == "user" else ""
        if not after and i == len(turns) - 1:
            after = str(trajectory.metadata.get("final_observation", ""))
        out.append((parsed.thought, parsed.action or "", after.removeprefix("Observation: ")))
    return out
