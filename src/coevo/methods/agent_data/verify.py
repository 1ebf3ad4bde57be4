"""Verification: a synthesized task joins the train set only if the environment confirms it.

Checks, cheapest first, each counted when it rejects:
- `test_overlap`: the task is a test task's (same id or key, or an instruction within the
  duplicate threshold of one, unless the env says its key alone decides,
  `coevo.envs.evolve.text_dedup`): synthesized tasks never leak into the test splits;
- `duplicate`: the same as a known task (same key) or an instruction with word-Jaccard >=
  0.8 to one (AgentEvolver's dedup), the tasks accepted just before it included;
- `unsolvable`: its gold / expert replay does not reach reward 1.0 (or the expert refuses);
  with `acceptance="positive"` (the CoEvolve paper's rule), a replay that ends with any
  positive reward passes too: a re-execution that fails the objective but scores;
- `nondeterministic`: a second replay does not give the same episode and reward.
`enabled=False` is the ablation: every candidate joins unchecked (the paper: a large drop).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from coevo.envs.base import Env
from coevo.envs.conversation import expert_trajectory
from coevo.envs.evolve import Candidate, task_key, text_dedup
from coevo.trajectory import Task

DUPLICATE_JACCARD = 0.8
REASONS = ("malformed", "test_overlap", "duplicate", "unsolvable", "nondeterministic")
"""Every reason a candidate is dropped (`malformed`: the explorer's answer or exploration
gave nothing usable; counted by synthesis)."""


def words(text: str) -> frozenset[str]:
    return frozenset(text.lower().split())


def jaccard(a: str, b: str) -> float:
    """Word-set Jaccard similarity of two instructions (1.0 for two empty ones)."""
    x, y = words(a), words(b)
    return 1.0 if not x and not y else len(x & y) / len(x | y)


@dataclass(frozen=True)
class Checked:
    """The candidates that passed, and how many each check rejected."""

    accepted: list[Candidate]
    rejected: dict[str, int]


class _Known:
    """Tasks to compare against: their ids, keys and instruction word sets."""

    def __init__(self, env: Env, tasks: Sequence[Task]) -> None:
        self.env = env
        self.by_text = text_dedup(env)
        self.ids: set[str] = set()
        self.keys: set[str] = set()
        self.texts: list[frozenset[str]] = []
        for t in tasks:
            self.add(t)

    def add(self, task: Task) -> None:
        self.ids.add(task.id)
        self.keys.add(task_key(self.env, task))
        self.texts.append(words(task.instruction))

    def holds(self, task: Task) -> bool:
        if task.id in self.ids or task_key(self.env, task) in self.keys:
            return True
        if not self.by_text:
            return False
        w = words(task.instruction)
        return any(_similar(w, other) for other in self.texts)


def _similar(x: frozenset[str], y: frozenset[str]) -> bool:
    union = len(x | y)
    return (len(x & y) / union if union else 1.0) >= DUPLICATE_JACCARD


ACCEPTANCE = ("complete", "positive")
"""What a candidate's replay must score: `complete` reward 1.0; `positive` any reward above 0
(the CoEvolve paper accepts a re-execution that fails but gets a positive reward)."""


def replay_check(env: Env, task: Task, acceptance: str = "complete") -> str | None:
    """None when the expert's replay of `task` scores as `acceptance` asks, twice alike; else
    the reason it fails."""
    try:
        first = expert_trajectory(env, task)
    except Exception:  # an expert that cannot solve the task refuses it: unsolvable
        return "unsolvable"
    scored = first.reward > 0 if acceptance == "positive" else math.isclose(first.reward, 1.0)
    if not scored:
        return "unsolvable"
    try:
        second = expert_trajectory(env, task)
    except Exception:
        return "nondeterministic"
    if second.reward != first.reward or second.turns != first.turns:
        return "nondeterministic"
    return None


def verify(
    env: Env,
    candidates: Sequence[Candidate],
    known: Sequence[Task],
    tests: Sequence[Task],
    *,
    enabled: bool = True,
    acceptance: str = "complete",
) -> Checked:
    """Check `candidates` in order against the env, the `known` train tasks (synthesized ones
    included) and the `tests` tasks; `acceptance` as `replay_check` takes it."""
    rejected: Counter[str] = Counter()
    if not enabled:
        return Checked(list(candidates), {})
    test_index, known_index = _Known(env, tests), _Known(env, known)
    accepted = []
    for candidate in candidates:
        task = candidate.task
        if test_index.holds(task):
            reason: str | None = "test_overlap"
        elif known_index.holds(task):
            reason = "duplicate"
        else:
            reason = replay_check(env, task, acceptance)
        if reason is not None:
            rejected[reason] += 1
            continue
        known_index.add(task)
        accepted.append(candidate)
    return Checked(accepted, dict(rejected))
