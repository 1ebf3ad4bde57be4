"""bfcl's side of agent-data co-evolution: the calls valid now (for the explorers without a
model), and the calls an explorer executed on a task's back-ends as a one-turn task whose
ground truth is that call sequence. `BfclEnv`'s methods of the same names (`coevo.envs.evolve`'s
capabilities) call these; its action pattern, the called function names, is its own
(`BfclEnv.action_pattern`)."""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from coevo.envs.bfcl import data
from coevo.envs.bfcl.actions import Pool, calls
from coevo.envs.bfcl.calls import CallSyntaxError, parse_calls
from coevo.envs.bfcl.data import task_of
from coevo.envs.evolve import Candidate, agent_actions
from coevo.envs.react import format_reply
from coevo.trajectory import Task, Trajectory

_TASK = re.compile(r"task\s*:\s*(.+)", re.I | re.S)
_MAX_CALLS = 8
MIN_STEPS = 3
"""`answer[...]` is valid once the turn has this many steps with calls (the paper: a task
needs at least 3 steps that ran)."""
ANSWER = "answer[I have done what I can with these functions.]"


def valid_actions(ep: Any) -> list[str]:
    """One call per action: the functions listed now (withheld ones only from their turn on),
    with arguments drawn from the episode's back-ends and results (`coevo.envs.bfcl.actions`),
    `VARIANTS` per function; then `answer[...]` once the turn has `MIN_STEPS` call steps.
    `ep` is the env's running episode (`coevo.envs.bfcl.env._Episode`)."""
    entry = ep.task.data
    later = {n for t, names in entry["missed_function"].items() if int(t) > ep.turn for n in names}
    docs = data.tool_docs(entry["involved_classes"], skip=later)
    rng = random.Random(f"{ep.task.id}|{ep.turn}|{ep.steps}")
    replies = [
        format_reply(f"I call {call.name} with values from what I have seen.", f"[{call}]")
        for call in calls(docs, Pool(ep.model, ep.results), rng)
    ]
    if ep.call_steps >= MIN_STEPS:
        replies.append(format_reply("I have made my calls, so I end the turn.", ANSWER))
    return replies


def exploration_task(task: Task, context: str, key: str) -> Task:
    """The task's back-ends and tools with one user turn, the exploration context, in place
    of its requests (the explorer never sees them); `answer[...]` ends the episode."""
    entry = {**task.data, "turns": [[context]], "ground_truth": [[]], "missed_function": {}}
    return Task(f"explore/{key}/{task.id}", "bfcl", "train", context, entry)


def tasks_from_exploration(trajectory: Trajectory) -> list[Candidate]:
    """One task from the exploration's calls that ran without an error (`_failed`), with the
    explorer's last `Task: ...` as the user's request, or a template one."""
    seed = trajectory.task.data
    if "involved_classes" not in seed:
        return []
    calls: list[str] = []
    request = None
    for thought, action, observation in agent_actions(trajectory):
        found = _TASK.search(thought)
        if found and 0 < len(found.group(1).strip()) <= 300:
            request = " ".join(found.group(1).split())
        try:
            parsed = parse_calls(action)
        except CallSyntaxError:
            continue
        lines = observation.splitlines()
        for call in parsed:
            text = str(call)
            if not any(_failed(line, text) for line in lines) and len(calls) < _MAX_CALLS:
                calls.append(text)
    if not calls:
        return []
    instruction = request or "Please do the following, in order: " + "; ".join(calls) + "."
    digest = hashlib.blake2b("\n".join([instruction, *calls]).encode(), digest_size=6).hexdigest()
    entry = {
        "entry_id": f"synth_{digest}",
        "category": "synth",
        "long_context": seed.get("long_context", False),
        "involved_classes": list(seed["involved_classes"]),
        "initial_config": seed["initial_config"],
        "turns": [[instruction]],
        "missed_function": {},
        "ground_truth": [calls],
    }
    return [Candidate(task_of(entry, "train"), {"calls": calls})]


def _failed(line: str, call: str) -> bool:
    """Whether `line` shows `call` failing: refused by the env (`Error: ...`), raising in the
    back-end (`Error during execution: ...`), or returning the back-ends' `{"error": ...}`
    (a wrong id, a missing file: a task of a call that does nothing teaches nothing)."""
    result = line.removeprefix(f"{call}: ")
    return result != line and (result.startswith("Error") or result.startswith('{"error"'))


def task_key(task: Task) -> str:
    """A task is its back-ends and ground-truth calls."""
    classes = ",".join(task.data.get("involved_classes", []))
    truth = "|".join(c for turn in task.data.get("ground_truth", []) for c in turn)
    return f"{classes}|{truth}"
