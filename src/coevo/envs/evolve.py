"""What an env offers agent-data co-evolution beyond the Env contract: optional capabilities,
each a small Protocol of one method that an env class implements (the built-in envs do, in
their `env.py`, each method a thin call into its package's `evolve` module). A user's env
needs no import from here: having the method is enough (the Protocols are runtime-checkable).

- `ClassifiesActions.action_pattern(action) -> str`: the kind of an action, for the
  rare-action signal (default: the action's first word, lower-cased);
- `StartsExplorations.exploration_task(task, context, key) -> Task`: a goal-free exploration
  episode started from a weak task (default: the task's own start, its instruction replaced by
  the exploration context, so the explorer never sees the goal and the episode's reward is
  not used);
- `SynthesizesTasks.tasks_from_exploration(trajectory) -> list[Candidate]`: the candidate
  tasks a recorded exploration yields (no default: each env knows what a task of its own is;
  agent_data refuses an env without it);
- `IdentifiesTasks.task_key(task) -> str`: what makes two tasks the same task, for the
  duplicate and test checks (default: the instruction's words);
- `ListsValidActions.valid_actions() -> list[str]`: the replies an explorer may send in the
  env's current episode (none between episodes), each `Thought: ...\nAction: ...`
  (`react.format_reply`) with an action the env accepts now and a thought saying what it is
  for (sql: `Task: <question>` for a query): the action space of the `random` and `guided`
  explorers (no default: only the env knows what is valid in its state);
- `text_dedup` (an attribute, default True): False when the key alone tells tasks apart and
  similar instructions do not make duplicates (ScienceWorld's variations differ by a word or
  two of a generated description).

The functions below are what agent_data calls: each uses the env's method when it has one,
else the default; an env without a needed capability gets one clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from coevo.envs.base import Env, EnvError
from coevo.envs.react import parse
from coevo.trajectory import Task, Trajectory


@dataclass(frozen=True)
class Candidate:
    """A task synthesized from an exploration, before verification."""

    task: Task
    origin: dict[str, Any] = field(default_factory=dict)
    """What in the exploration it came from (the bought product, the executed query, ...)."""


@runtime_checkable
class ClassifiesActions(Protocol):
    """An env that names the kind of an action (its pattern) for the rare-action signal."""

    def action_pattern(self, action: str) -> str: ...


@runtime_checkable
class StartsExplorations(Protocol):
    """An env with its own goal-free exploration episode of a task."""

    def exploration_task(self, task: Task, context: str, key: str) -> Task: ...


@runtime_checkable
class SynthesizesTasks(Protocol):
    """An env that turns a recorded exploration into candidate tasks: what agent_data needs."""

    def tasks_from_exploration(self, trajectory: Trajectory) -> list[Candidate]: ...


@runtime_checkable
class IdentifiesTasks(Protocol):
    """An env that says what makes two of its tasks the same task."""

    def task_key(self, task: Task) -> str: ...


@runtime_checkable
class ListsValidActions(Protocol):
    """An env that lists the replies valid in its current episode (for the explorers without
    a model)."""

    def valid_actions(self) -> list[str]: ...


def first_word(action: str) -> str:
    """The default action pattern: the action's first word, before any bracket or paren."""
    head = action.strip().split(maxsplit=1)
    word = head[0] if head else ""
    for mark in ("[", "("):
        word = word.split(mark, 1)[0]
    return word.lower()


def action_pattern(env: Env) -> Callable[[str], str]:
    """The env's action pattern (default: `first_word`)."""
    return env.action_pattern if isinstance(env, ClassifiesActions) else first_word


def exploration_task(env: Env, task: Task, context: str, key: str) -> Task:
    """The task an exploration episode plays (always of the train split)."""
    if isinstance(env, StartsExplorations):
        return env.exploration_task(task, context, key)
    return replace(task, id=f"explore/{key}/{task.id}", split="train", instruction=context)


def require(env: Env, *, walk: bool = False) -> None:
    """Raise the clear error now if `env` cannot turn explorations into tasks, or (`walk`:
    the random and guided explorers) cannot say which actions are valid."""
    _synthesizer(env)
    if walk:
        _walker(env)


def _synthesizer(env: Env) -> SynthesizesTasks:
    if not isinstance(env, SynthesizesTasks):
        raise EnvError(
            f"Env {getattr(env, 'name', env)!r} cannot turn explorations into tasks: give it a "
            "tasks_from_exploration(trajectory) method (coevo.envs.evolve) to use agent_data."
        )
    return env


def _walker(env: Env) -> ListsValidActions:
    if not isinstance(env, ListsValidActions):
        raise EnvError(
            f"Env {getattr(env, 'name', env)!r} cannot list its valid actions, which the random "
            "and guided explorers choose from: give it a valid_actions() method "
            "(coevo.envs.evolve), or use agent_data.explorer.kind=llm."
        )
    return env


def valid_actions(env: Env) -> list[str]:
    """The replies the env accepts in its current episode (see the module docstring)."""
    return list(_walker(env).valid_actions())


def tasks_from_exploration(env: Env, trajectory: Trajectory) -> list[Candidate]:
    return list(_synthesizer(env).tasks_from_exploration(trajectory))


def text_dedup(env: Env) -> bool:
    """Whether near-identical instructions count as the same task (default: yes)."""
    return bool(getattr(env, "text_dedup", True))


def task_key(env: Env, task: Task) -> str:
    if isinstance(env, IdentifiesTasks):
        return str(env.task_key(task))
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
