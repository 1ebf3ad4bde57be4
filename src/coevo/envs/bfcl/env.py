"""`BfclEnv`: BFCL v4 multi-turn function calling on the `bfcl-eval` package's back-ends.

    env = BfclEnv()                        # tasks from the package's data (see data.py)
    observation, info = env.reset(env.tasks("train")[0])     # "User: <first request>"
    env.step("Thought: ...\\nAction: [cd(folder='document'), mkdir(dir_name='temp')]")
    env.step("Thought: ...\\nAction: answer[The folder is made.]")   # next user turn

A task is one entry; an episode plays its user turns in order. Each action is either function
calls in BFCL's Python syntax, whose results are the observation, or `answer[...]`, which ends
the current user turn (BFCL ends it when the model writes no calls) and shows the next request.
In `miss_func` entries the withheld functions are left out of the instructions until the turn
that adds them, whose observation lists them in the package's words. As in the package, they can
still be called before (its executor maps every public method of the back-ends, and one entry's
ground truth, miss_func_49, calls `tail` two turns before it is offered).

`max_steps` is the budget of one user turn (BFCL's: 20 call steps, plus the answer). A turn that
uses it up ends the episode, truncated, and fails the entry, as BFCL force-terminates it.
Reward, at the end: 1.0 when the entry passes the package's checks (coevo.envs.bfcl.checker),
else 0, with the reason in `info["checker"]` and the graded `info["turn_pass_share"]`;
`reward="turns"` makes that share the reward.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from coevo.envs.base import EnvError, EpisodeClock, NoEpisodeError, StepResult, check_split
from coevo.envs.bfcl import data, evolve
from coevo.envs.bfcl.backend import Backend, Outcome
from coevo.envs.bfcl.calls import CallSyntaxError, parse_answer, parse_calls
from coevo.envs.bfcl.checker import TurnCheck, Verdict, check_turn, forced, verdict
from coevo.envs.bfcl.docs import DOCS, FORMAT, render_docs
from coevo.envs.evolve import Candidate
from coevo.envs.react import FORMAT_ERROR, format_reply, parse
from coevo.trajectory import Task, Trajectory, Turn

REWARDS = ("entry", "turns")
DONE = "All of the user's requests have been handled; the episode is over."

ACTIONS = """\
Reply with one line 'Thought: <your reasoning>' followed by one line 'Action: <action>'. \
The action is one of:
- function calls in the format {output_format}, with literal argument values (strings, \
numbers, lists, dicts, True, False, None); the observation gives each call's result;
- answer[<your reply to the user>] when you have no more functions to call: it ends the \
current turn, and the user's next request follows.
{multiturn_behavior} You have at most {max_steps} actions per user turn."""


def _templates() -> dict[str, str]:
    """BFCL's default prompt parts (style `classic`, calls in Python syntax, docs in JSON)."""
    from bfcl_eval.constants.default_prompts import (
        DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
        OUTPUT_FORMAT_MAPPING,
        PROMPT_STYLE_TEMPLATES,
    )

    return {
        **PROMPT_STYLE_TEMPLATES["classic"],
        "output_format": OUTPUT_FORMAT_MAPPING["python"],
        "added": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
    }


@dataclass
class _Episode:
    """One episode's state: its own back-ends (the agent's and the ground truth's) and record."""

    task: Task
    model: Backend
    truth: Backend
    turn: int = 0
    call_steps: int = 0
    """Steps of the current turn that made calls (the package checks a turn had some)."""
    results: list[str] = field(default_factory=list)
    """Every result the agent's calls returned so far, all turns."""
    checks: list[TurnCheck] = field(default_factory=list)
    steps: int = 0


class BfclEnv:
    """BFCL multi-turn entries: call the back-ends' functions, answer, pass the checker."""

    name = "bfcl"

    def __init__(
        self,
        *,
        seed: int = 0,
        n_test: int = 50,
        max_steps: int = 21,
        max_result_chars: int | None = None,
        reward: str = "entry",
        docs: str = "package",
    ) -> None:
        """`seed` and `n_test` draw the held-out scenarios (data.py); `max_steps` is the budget
        of one user turn; `max_result_chars` cuts each call result in the observation (None:
        whole, as BFCL shows them; the checker always sees them whole); `reward` is `entry`
        (1.0 when the entry passes, else 0) or `turns` (the turn pass share); `docs` how the
        functions are listed: `package`, `compact` or `signatures` (coevo.envs.bfcl.docs)."""
        if not isinstance(max_steps, int) or max_steps < 2:
            raise EnvError(f"bfcl option max_steps must be an integer >= 2, got {max_steps!r}.")
        if max_result_chars is not None and (
            not isinstance(max_result_chars, int) or max_result_chars < 1
        ):
            raise EnvError(
                f"bfcl option max_result_chars must be a positive integer or None, got "
                f"{max_result_chars!r}."
            )
        if reward not in REWARDS:
            raise EnvError(f"bfcl option reward must be one of {REWARDS}, got {reward!r}.")
        if docs not in DOCS:
            raise EnvError(f"bfcl option docs must be one of {DOCS}, got {docs!r}.")
        self.docs = docs
        self.max_result_chars = max_result_chars
        self.reward_kind = reward
        self._tasks = data.build_tasks(seed, n_test)
        self._templates = _templates()
        self._actions = ACTIONS.format(max_steps=max_steps, **self._templates)
        # BFCL's budget is per user turn: the clock restarts at every turn.
        self._clock = EpisodeClock(max_steps)
        self._episode: _Episode | None = None
        self._prompt = self._instructions(None)

    @property
    def max_steps(self) -> int:
        return self._clock.max_steps

    @property
    def instruction_prompt(self) -> str:
        """BFCL's instructions, the action grammar and the current task's functions."""
        return self._prompt

    def _instructions(self, docs: list[dict[str, Any]] | None) -> str:
        t = self._templates
        head = f"{t['persona']} {t['task']}\n\n{self._actions}"
        if docs is None:
            return f"{head}\n\nThe functions you can invoke are listed here once a task starts."
        functions = render_docs(docs, self.docs)
        tools = t["available_tools"].format(format=FORMAT[self.docs], functions=functions)
        return f"{head}\n\n{tools}"

    @functools.lru_cache(maxsize=64)  # noqa: B019 (a few dozen class sets; the env lives long)
    def _tools_prompt(self, classes: tuple[str, ...], held: frozenset[str]) -> str:
        return self._instructions(data.tool_docs(list(classes), skip=set(held)))

    def tasks(self, split: str) -> list[Task]:
        return list(self._tasks[check_split(split)])

    # -- episodes --------------------------------------------------------------------------

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        entry = _entry(task)
        self._episode = None  # the previous episode's back-ends go now
        held = {name for names in entry["missed_function"].values() for name in names}
        backends = [
            Backend(entry["involved_classes"], entry["initial_config"], entry["long_context"])
            for _ in range(2)
        ]
        self._episode = _Episode(task, *backends)
        self._prompt = self._tools_prompt(tuple(entry["involved_classes"]), frozenset(held))
        self._clock.start()
        info = {
            "entry_id": entry["entry_id"],
            "category": entry["category"],
            "turns": len(entry["turns"]),
        }
        return self._turn_message(self._episode), info

    def _turn_message(self, ep: _Episode) -> str:
        """The user's message that opens the current turn (or the newly added functions)."""
        entry = ep.task.data
        messages = list(entry["turns"][ep.turn])
        arriving = entry["missed_function"].get(str(ep.turn))
        if arriving:
            # In the entry's order and without the Python hint, as the package adds them.
            classes = entry["involved_classes"]
            docs = [d for n in arriving for d in data.tool_docs(classes, {n}, hint=False)]
            messages.insert(0, f"{render_docs(docs, self.docs)}\n{self._templates['added']}")
        return "User: " + "\n".join(messages)

    def step(self, action: str) -> StepResult:
        self._clock.tick()
        ep = self._episode
        if ep is None:  # the last reset failed part way
            raise NoEpisodeError("step() was called without a started episode: call reset(task).")
        ep.steps += 1
        info: dict[str, Any] = {"turn": ep.turn, "step": ep.steps, "error": None}
        terminated = False
        parsed = parse(action)
        answer = parse_answer(parsed.action) if parsed.ok else None
        if not parsed.ok:
            observation = FORMAT_ERROR
            info["error"] = "format"
        elif answer is not None:
            self._end_turn(ep)
            ep.turn += 1
            terminated = ep.turn == len(ep.task.data["turns"])
            if terminated:
                observation = DONE
            else:
                observation = self._turn_message(ep)
                self._clock.start()  # a new turn, a new budget
        else:
            observation = self._run_calls(ep, parsed.action, info)
        truncated = self._clock.finish(terminated)
        if truncated:
            ep.checks.append(forced(ep.turn))
        reward = 0.0
        if terminated or truncated:
            result = verdict(ep.checks, ep.task.data["ground_truth"])
            reward = result.turn_pass_share if self.reward_kind == "turns" else float(result.valid)
            info.update(_end_info(result))
            # The back-ends are released with the episode; the verdict is all that is kept.
            self._episode = None
        return StepResult(observation, reward, terminated, truncated, info)

    def _run_calls(self, ep: _Episode, action: str, info: dict[str, Any]) -> str:
        try:
            calls = parse_calls(action)
        except CallSyntaxError as exc:
            info["error"] = str(exc)
            return str(exc)
        outcomes = []
        for call in calls:
            outcome = ep.model.call(call)
            if outcome.executed:
                ep.results.append(outcome.result)
            outcomes.append(outcome)
        ep.call_steps += 1
        errors = [f"{o.call.name}: {o.error}" for o in outcomes if o.error]
        info["calls"] = len(calls)
        info["error"] = "; ".join(errors) or None
        return "\n".join(self._show(o) for o in outcomes)

    def _show(self, outcome: Outcome) -> str:
        if outcome.error and not outcome.executed:
            return f"{outcome.call}: Error: {outcome.error}."
        text = outcome.result
        if self.max_result_chars is not None and len(text) > self.max_result_chars:
            text = text[: self.max_result_chars] + f" ... [{len(text)} characters, cut]"
        return f"{outcome.call}: {text}"

    def _end_turn(self, ep: _Episode) -> None:
        """Run the turn's ground truth on its own back-end and check the agent's turn."""
        truth_calls = ep.task.data["ground_truth"][ep.turn]
        truth_results = []
        for call_text in truth_calls:
            (call,) = parse_calls(call_text)
            truth_results.append(ep.truth.call(call).result)
        ep.checks.append(
            check_turn(
                ep.turn, truth_calls, ep.call_steps, ep.model, ep.truth, ep.results, truth_results
            )
        )
        ep.call_steps = 0

    # -- expert ----------------------------------------------------------------------------

    def expert(self, task: Task) -> list[Turn]:
        """Each turn's ground-truth calls in one action, then an answer (reward 1.0)."""
        entry = _entry(task)
        replies = []
        for calls in entry["ground_truth"]:
            if calls:
                names = list(dict.fromkeys(parse_calls(c)[0].name for c in calls))
                replies.append(
                    format_reply(
                        f"I call {_listing(names)} to do what the user asked.",
                        "[" + ", ".join(calls) + "]",
                    )
                )
                replies.append(
                    format_reply(
                        "That completes this request, so I tell the user.",
                        "answer[Done: I have completed your request.]",
                    )
                )
            else:
                replies.append(
                    format_reply(
                        "I cannot do this with the functions and information I have, so I say so.",
                        "answer[I cannot do this with the functions and information I have.]",
                    )
                )
        return [Turn("assistant", r) for r in replies]

    # -- agent-data co-evolution: coevo.envs.evolve's capabilities, done in evolve.py ------

    def action_pattern(self, action: str) -> str:
        """The action's kind for the agent-data signals: the called function names in order
        (joined by '+'), `answer`, or `invalid`."""
        parsed = parse(action)
        if not parsed.ok:
            return "invalid"
        if parse_answer(parsed.action) is not None:
            return "answer"
        try:
            calls = parse_calls(parsed.action)
        except CallSyntaxError:
            return "invalid"
        return "+".join(dict.fromkeys(c.name for c in calls))

    def valid_actions(self) -> list[str]:
        """Calls of the functions listed now, then `answer[...]` (none between episodes)."""
        if self._episode is None or not self._clock.running:
            return []
        return evolve.valid_actions(self._episode)

    def exploration_task(self, task: Task, context: str, key: str) -> Task:
        return evolve.exploration_task(task, context, key)

    def tasks_from_exploration(self, trajectory: Trajectory) -> list[Candidate]:
        return evolve.tasks_from_exploration(trajectory)

    def task_key(self, task: Task) -> str:
        return evolve.task_key(task)

    def close(self) -> None:
        self._episode = None


def _end_info(result: Verdict) -> dict[str, Any]:
    return {"checker": result.to_info(), "turn_pass_share": result.turn_pass_share}


def _listing(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


_KEYS = (
    "entry_id", "category", "long_context", "involved_classes", "initial_config", "turns",
    "missed_function", "ground_truth",
)  # fmt: skip


def _entry(task: Task) -> dict[str, Any]:
    """The task's entry, checked for shape: a clear error for a task of another env."""
    entry = task.data
    missing = [k for k in _KEYS if k not in entry]
    if missing:
        raise EnvError(f"Task {task.id!r} is not a bfcl task: its data lacks {', '.join(missing)}.")
    unknown = [c for c in entry["involved_classes"] if c not in data.CLASSES]
    if unknown:
        raise EnvError(f"Task {task.id!r} names unknown bfcl back-ends: {', '.join(unknown)}.")
    if len(entry["turns"]) != len(entry["ground_truth"]) or not entry["turns"]:
        raise EnvError(
            f"Task {task.id!r} needs one ground-truth call list per user turn, got "
            f"{len(entry['turns'])} turns and {len(entry['ground_truth'])} lists."
        )
    for text in (t for calls in entry["ground_truth"] for t in calls):
        try:
            if len(parse_calls(text)) == 1:
                continue
        except CallSyntaxError:
            pass
        raise EnvError(f"Task {task.id!r}: ground-truth call {text!r} is not one literal call.")
    return entry
