"""ScienceWorld's side of agent-data co-evolution: the simulator defines the goals, so an
exploration of a weak task yields the variations of its task type nearest to it that the
train set lacks, from the package's *train* variations only (dev and test variations are the
test splits'). The explorers without a model walk over the simulator's own list of valid
actions."""

from __future__ import annotations

from typing import Any

from coevo.envs.evolve import Candidate
from coevo.envs.react import format_reply
from coevo.envs.sciworld.manifest import task_row
from coevo.envs.sciworld.simulator import SimulatorError
from coevo.trajectory import Task, Trajectory

NEAREST = 2
"""Variations proposed per exploration."""
TEXT_DEDUP = False
"""Variations of one type have near-identical descriptions (a colour, a room): the task name
and variation alone (`task_key`) say whether two tasks are the same."""


def action_pattern(env: Any, action: str) -> str:
    """The action's verb (`open`, `focus on`, `pick up`, ...): two-word verbs kept whole."""
    words = action.strip().lower().split()
    if not words:
        return ""
    if len(words) > 1 and (words[0], words[1]) in {
        ("focus", "on"),
        ("pick", "up"),
        ("look", "at"),
        ("look", "around"),
        ("put", "down"),
    }:
        return f"{words[0]} {words[1]}"
    return words[0]


def valid_actions(env: Any) -> list[str]:
    """The simulator's valid action-object combinations in the current state, sorted, without
    `focus on ...`: focusing commits to an answer and a wrong focus ends the episode, so an
    explorer that focused at random would see little else. The simulator's parser refuses a
    few of its own combinations (about 1 step in 10 of a random walk: `pour bee 2 into flower
    pot 2`), which then cost a step like any unknown action."""
    # SciWorldEnv keeps the episode's task and clock: read them here.
    if env._task is None or not env._clock.running:
        return []
    try:
        found = env.sim.call(_valid_combinations)
    except SimulatorError:  # the JVM was replaced and the episode's world is gone
        return []
    return [
        format_reply("I try something this room allows.", a)
        for a in sorted(set(found))
        if not a.startswith("focus on")
    ]


def _valid_combinations(server: Any) -> list[str]:
    return [str(a) for a in server.getValidActionObjectCombinations()]


def nearest_missing(variation: int, train: list[int], have: set[int], n: int) -> list[int]:
    """The `n` variations of `train` closest to `variation` that `have` lacks."""
    missing = [v for v in train if v not in have]
    return sorted(missing, key=lambda v: (abs(v - variation), v))[:n]


def tasks_from_exploration(env: Any, trajectory: Trajectory) -> list[Candidate]:
    name, variation = trajectory.task.data.get("task_name"), trajectory.task.data.get("variation")
    if not isinstance(name, str) or not isinstance(variation, int):
        return []
    have = {t.data["variation"] for t in env.tasks("train") if t.data["task_name"] == name}
    train = list(env.sim.variations(name).get("train", []))
    out = []
    for v in nearest_missing(variation, train, have, NEAREST):
        row = task_row(env.sim, "train", name, v)
        data = {"task_name": name, "variation": v, "max_steps": env.types[name]["budget"]}
        task = Task(row["id"], "sciworld", "train", row["instruction"], data)
        out.append(Candidate(task, {"task_name": name, "variation": v, "near": variation}))
    return out


def task_key(env: Any, task: Task) -> str:
    return f"{task.data.get('task_name')}-{task.data.get('variation')}"
