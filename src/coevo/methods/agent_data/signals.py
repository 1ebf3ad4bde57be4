"""Weakness signals: pure functions over the stored trajectories of GRPO steps.

Three kinds (CoEvolve, Sec. 3; success = reward >= 0.5):
- forgetting: a task whose current attempt fails while one of its last W attempts succeeded;
- boundary: a task whose K samples in one step hold both successes and failures;
- rare: an action pattern seen in 0 < c_p / N < theta / 100 of the step's N trajectories
  (what a pattern is, each env says: `coevo.envs.evolve.action_pattern`).

Each signal names its task and the trajectories behind it (their indices in the step's list),
so the explorer can be shown exactly what went wrong and a user can audit why a task was made.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coevo.envs.react import parse
from coevo.trajectory import Task, Trajectory

PASS = 0.5
"""A trajectory at or above this reward counts as a success for the signals (the paper's)."""
KINDS = ("forgetting", "boundary", "rare")


@dataclass(frozen=True)
class Signal:
    """One weakness: its kind, the task it points at, and the trajectories behind it."""

    kind: str
    task: Task
    trajectories: tuple[int, ...]
    """Indices into the step's trajectories."""
    detail: dict[str, Any] = field(default_factory=dict)
    """What makes it a signal (the pattern and its share, the rewards of the window)."""

    @property
    def task_id(self) -> str:
        return self.task.id


@dataclass(frozen=True)
class Found:
    """A signal of a round as the round records it (`stages/evolve-<i>/signals.jsonl`, and
    the provenance of what it leads to): the step it fired at, its kind, its task, the store
    rows of its trajectories, and what made it a signal."""

    step: int
    kind: str
    task_id: str
    rows: tuple[int, ...]
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, signal: Signal, step: int, rows: Sequence[int]) -> Found:
        """`signal` of `step`, whose trajectories are the store rows `rows`."""
        return cls(step, signal.kind, signal.task.id, tuple(rows), signal.detail)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.kind,
            "task": self.task_id,
            "rows": list(self.rows),
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Found:
        return cls(d["step"], d["kind"], d["task"], tuple(d["rows"]), d.get("detail", {}))


def _ok(reward: float) -> bool:
    return reward >= PASS


def _by_task(step: Sequence[Trajectory]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(step):
        groups.setdefault(t.task.id, []).append(i)
    return groups


def boundary(step: Sequence[Trajectory]) -> list[Signal]:
    """Tasks whose samples in this step both succeed and fail (the edge of what it can do)."""
    out = []
    for idx in _by_task(step).values():
        wins = [_ok(step[i].reward) for i in idx]
        if any(wins) and not all(wins):
            rewards = [step[i].reward for i in idx]
            out.append(Signal("boundary", step[idx[0]].task, tuple(idx), {"rewards": rewards}))
    return out


def forgetting(
    history: dict[str, Sequence[float]], step: Sequence[Trajectory], window: int
) -> list[Signal]:
    """Tasks this step fails although one of their last `window` attempts succeeded.

    `history` maps a task id to the rewards of its earlier attempts, oldest first (this step
    not included); a task with fewer than `window` earlier attempts looks at those it has. The
    current attempt is the step's mean over the task's samples: a task forgotten by one sample
    of eight but solved by the rest is a boundary, not forgotten.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}.")
    out = []
    for task_id, idx in _by_task(step).items():
        current = sum(step[i].reward for i in idx) / len(idx)
        recent = list(history.get(task_id, ()))[-window:]
        if not _ok(current) and any(_ok(r) for r in recent):
            detail = {"current": current, "recent": recent}
            out.append(Signal("forgetting", step[idx[0]].task, tuple(idx), detail))
    return out


def rare(step: Sequence[Trajectory], pattern: Callable[[str], str], theta: float) -> list[Signal]:
    """Action patterns in fewer than `theta` percent of the step's trajectories (but some):
    one signal per (pattern, task) that used it, pointing at the trajectories that did."""
    if not 0 < theta <= 100:
        raise ValueError(f"theta must be in (0, 100], got {theta}.")
    n = len(step)
    used = [set(patterns(t, pattern)) for t in step]
    counts = Counter(p for seen in used for p in seen)
    out = []
    for p in sorted(counts):
        share = counts[p] / n
        if not share < theta / 100:
            continue
        for idx in _by_task(step).values():
            with_p = tuple(i for i in idx if p in used[i])
            if with_p:
                detail = {"pattern": p, "share": share}
                out.append(Signal("rare", step[with_p[0]].task, with_p, detail))
    return out


def rare_can_fire(trajectories: int, theta: float) -> bool:
    """Whether a pattern can be rare in a step of `trajectories`: one trajectory in N must be
    under `theta` percent (at theta 5, a step needs more than 20 trajectories)."""
    return trajectories * theta / 100 > 1


def patterns(t: Trajectory, pattern: Callable[[str], str]) -> list[str]:
    """The action patterns of a trajectory's agent turns, in order (empty ones dropped)."""
    out = []
    for turn in t.turns:
        if turn.role != "assistant":
            continue
        parsed = parse(turn.text)
        if parsed.ok:
            p = pattern(parsed.action)
            if p:
                out.append(p)
    return out


def history_of(steps: Sequence[Sequence[Trajectory]]) -> dict[str, list[float]]:
    """Task id -> the mean reward of each step that played it, oldest first."""
    out: dict[str, list[float]] = {}
    for step in steps:
        for task_id, idx in _by_task(step).items():
            out.setdefault(task_id, []).append(sum(step[i].reward for i in idx) / len(idx))
    return out


def step_signals(
    earlier: Sequence[Sequence[Trajectory]],
    step: Sequence[Trajectory],
    *,
    pattern: Callable[[str], str],
    window: int,
    theta: float,
    kinds: Sequence[str] = KINDS,
) -> list[Signal]:
    """The signals of one step, of the kinds asked for; `earlier` are the steps before it."""
    out: list[Signal] = []
    if "forgetting" in kinds:
        out += forgetting(history_of(earlier), step, window)
    if "boundary" in kinds:
        out += boundary(step)
    if "rare" in kinds:
        out += rare(step, pattern, theta)
    return out
