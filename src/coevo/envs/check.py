"""A conformance checker any env can be run through, ours or a user's (like Gymnasium's).

    report = check_env(env, tasks_per_split=30)
    report.ok, report.failures

Checks, per split: tasks exist; the expert reaches reward 1.0; replaying the same task and
actions gives the same observations and reward; rewards stay in [0, 1] and are 0 before the end;
malformed and impossible actions return an observation and use a step; the step budget
truncates; a step after the end raises a clear error.

A task the env has no demonstration for (`NoDemonstrationError`, e.g. a ScienceWorld gold path
longer than its type's budget in ETO's lists) is a fact of the task list, not a failure: the
report counts and names such tasks apart and checks the expert on the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coevo.envs.base import SPLITS, Env, NoDemonstrationError, StepResult
from coevo.envs.conversation import expert_trajectory
from coevo.trajectory import Task

# Replies no env should accept as a valid action. Each must come back as an observation.
MALFORMED_REPLIES: tuple[str, ...] = (
    "",
    "Thought: I am thinking but I give no action.",
    "Action:",
    "\x00\x01 \ufffd garbage ]][[",
)
IMPOSSIBLE_REPLIES: tuple[str, ...] = (
    "Thought: try something that cannot exist.\nAction: click[no such button 9f3a]",
    "Action: frobnicate the quantum widget",
    "Action: " + "x" * 10_000,
    "Action: ☃ ünïcödé ✓ 漢字",
)


@dataclass
class CheckResult:
    name: str
    passed: int = 0
    failed: int = 0
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str, keep: int = 5) -> None:
        self.failed += 1
        if len(self.problems) < keep:
            self.problems.append(problem)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.passed > 0


@dataclass
class CheckReport:
    env: str
    results: dict[str, CheckResult] = field(default_factory=dict)
    seconds: float = 0.0
    undemonstrated: dict[str, str] = field(default_factory=dict)
    """Tasks without a demonstration, by id: why the env has none (not failures)."""

    def result(self, name: str) -> CheckResult:
        return self.results.setdefault(name, CheckResult(name))

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results.values())

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results.values() if not r.ok]


def _safe_step(env: Env, reply: str) -> tuple[StepResult | None, str | None]:
    try:
        result = env.step(reply)
    except Exception as exc:  # the checker reports what an env raises, whatever it is
        return None, f"{type(exc).__name__}: {exc}"
    return result, None


def _check_result_shape(result: StepResult, where: str, check: CheckResult) -> None:
    if not isinstance(result.observation, str):
        check.fail(f"{where}: observation is {type(result.observation).__name__}, not str")
    elif not isinstance(result.info, dict):
        check.fail(f"{where}: info is {type(result.info).__name__}, not dict")
    elif not (isinstance(result.reward, int | float) and 0.0 <= result.reward <= 1.0):
        check.fail(f"{where}: reward {result.reward!r} is outside [0, 1]")
    elif not result.done and result.reward != 0.0:
        check.fail(f"{where}: reward {result.reward} before the episode ended (must be 0)")
    else:
        check.passed += 1


def _check_expert_and_determinism(env: Env, task: Task, report: CheckReport) -> None:
    expert, same = report.result("expert reaches 1.0"), report.result("deterministic replay")
    shape = report.result("rewards in [0, 1], 0 before the end")
    try:
        first = expert_trajectory(env, task)
        second = expert_trajectory(env, task)
    except NoDemonstrationError as exc:
        report.undemonstrated[task.id] = str(exc)
        return
    except Exception as exc:
        expert.fail(f"{task.id}: expert raised {type(exc).__name__}: {exc}")
        return
    if first.success and first.terminated:
        expert.passed += 1
    else:
        expert.fail(
            f"{task.id}: expert got reward {first.reward} (terminated={first.terminated}, "
            f"steps={first.steps}); last observation: {first.metadata.get('final_observation', '')[:200]!r}"
        )
    if first.turns == second.turns and first.reward == second.reward:
        same.passed += 1
    else:
        same.fail(f"{task.id}: two replays of the expert differ")
    ok = 0.0 <= first.reward <= 1.0
    if ok:
        shape.passed += 1
    else:
        shape.fail(f"{task.id}: expert reward {first.reward} outside [0, 1]")


def _check_bad_actions(env: Env, task: Task, report: CheckReport) -> None:
    """Every bad reply gets an observation; episodes of bad replies truncate at the budget."""
    bad = report.result("bad actions answered, step used")
    budget = report.result("step budget truncates")
    after = report.result("step after the end raises")
    shape = report.result("rewards in [0, 1], 0 before the end")
    replies = [*MALFORMED_REPLIES, *IMPOSSIBLE_REPLIES]
    # Episodes of bad replies until every reply was tried and at least one episode ran out
    # its whole budget; a budget shorter than the list spreads the replies over episodes.
    i = 0
    while i < len(replies) or budget.passed + budget.failed == 0:
        try:
            env.reset(task)
        except Exception as exc:
            bad.fail(f"{task.id}: reset raised {type(exc).__name__}: {exc}")
            return
        for step in range(1, env.max_steps + 1):
            reply = replies[i % len(replies)]
            i += 1
            result, error = _safe_step(env, reply)
            if error is not None:
                bad.fail(f"{task.id}: step {step} with {reply[:40]!r} raised {error}")
                return
            assert result is not None
            _check_result_shape(result, f"{task.id} step {step}", shape)
            if not result.observation.strip():
                bad.fail(f"{task.id}: {reply[:40]!r} returned an empty observation")
            elif result.terminated:
                bad.fail(f"{task.id}: bad action {reply[:40]!r} ended the episode at step {step}")
                return
            else:
                bad.passed += 1
            if result.truncated and step < env.max_steps:
                budget.fail(f"{task.id}: truncated at step {step}, budget is {env.max_steps}")
                return
        if not result.truncated:
            budget.fail(f"{task.id}: not truncated after max_steps={env.max_steps} steps")
            return
        budget.passed += 1
        _, error = _safe_step(env, "Action: anything")
        if error is None:
            after.fail(f"{task.id}: a step after truncation did not raise")
            return
        after.passed += 1


def check_env(
    env: Env,
    tasks_per_split: int = 30,
    splits: tuple[str, ...] = SPLITS,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Run every check on the first `tasks_per_split` tasks of each split."""
    report = CheckReport(env=getattr(env, "name", type(env).__name__))
    start = time.perf_counter()
    listed = report.result("tasks listed per split")
    for split in splits:
        try:
            tasks = env.tasks(split)[:tasks_per_split]
        except Exception as exc:
            listed.fail(f"{split}: tasks() raised {type(exc).__name__}: {exc}")
            continue
        if not tasks:
            listed.fail(f"{split}: no tasks")
            continue
        listed.passed += 1
        for task in tasks:
            if progress:
                progress(f"{split}: {task.id}")
            _check_expert_and_determinism(env, task, report)
        # Bad-action and budget checks cost max_steps each: a few tasks per split suffice.
        for task in tasks[:3]:
            _check_bad_actions(env, task, report)
    report.seconds = time.perf_counter() - start
    return report
