"""bfcl's side of agent-data co-evolution: the calls an explorer executed on a task's back-ends
become a one-turn task whose ground truth is that call sequence. (Its action pattern, the
called function names, is `BfclEnv.action_pattern`.)"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from coevo.envs.bfcl.calls import CallSyntaxError, parse_calls
from coevo.envs.bfcl.data import task_of
from coevo.envs.evolve import Candidate, agent_actions
from coevo.trajectory import Task, Trajectory

_TASK = re.compile(r"task\s*:\s*(.+)", re.I | re.S)
_MAX_CALLS = 8


def exploration_task(env: Any, task: Task, context: str, key: str) -> Task:
    """The task's back-ends and tools with one user turn, the exploration context, in place
    of its requests (the explorer never sees them); `answer[...]` ends the episode."""
    entry = {**task.data, "turns": [[context]], "ground_truth": [[]], "missed_function": {}}
    return Task(f"explore/{key}/{task.id}", "bfcl", "train", context, entry)


def tasks_from_exploration(env: Any, trajectory: Trajectory) -> list[Candidate]:
    """One task from the exploration's executed calls (failed calls left out), with the
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
            failed = any(line.startswith(f"{text}: Error:") for line in lines)
            if not failed and len(calls) < _MAX_CALLS:
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


def task_key(env: Any, task: Task) -> str:
    """A task is its back-ends and ground-truth calls."""
    classes = ",".join(task.data.get("involved_classes", []))
    truth = "|".join(c for turn in task.data.get("ground_truth", []) for c in turn)
    return f"{classes}|{truth}"
