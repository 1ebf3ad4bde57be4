"""ScienceWorld's side of agent-data co-evolution: the simulator defines the goals, so an
exploration of a weak task yields the variations of its task type nearest to it that the
train set lacks, from the package's *train* variations only (dev and test variations are the
test splits'). The explorers without a model walk over the simulator's own list of valid
actions. `SciWorldEnv`'s methods of the same names (`coevo.envs.evolve`'s capabilities) call
these with the env's simulator and tasks."""

from __future__ import annotations

from typing import Any

from coevo.envs.evolve import Candidate
from coevo.envs.react import format_reply
from coevo.envs.sciworld.manifest import task_row
from coevo.envs.sciworld.simulator import Simulator, SimulatorError
from coevo.trajectory import Task, Trajectory

NEAREST = 2
"""Variations proposed per exploration."""


def action_pattern(action: str) -> str:
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


def valid_actions(sim: Simulator) -> list[str]:
    """The simulator's valid action-object combinations in the current state, sorted, without
    `focus on ...`: focusing commits to an answer and a wrong focus ends the episode, so an
    explorer that focused at random would see little else. The simulator's parser refuses a
    few of its own combinations (about 1 step in 10 of a random walk: `pour bee 2 into flower
    pot 2`), which then cost a step like any unknown action."""
    try:
        found = sim.call(_valid_combinations)
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


def tasks_from_exploration(
    sim: Simulator, types: dict[str, dict[str, Any]], train: list[Task], trajectory: Trajectory
) -> list[Candidate]:
    """The `NEAREST` train variations of the explored task's type that the train set (`train`)
    lacks, each with its type's step budget (`types`: the manifest's task types)."""
    name, variation = trajectory.task.data.get("task_name"), trajectory.task.data.get("variation")
    if not isinstance(name, str) or not isinstance(variation, int):
        return []
    have = {t.data["variation"] for t in train if t.data["task_name"] == name}
    package_train = list(sim.variations(name).get("train", []))
    out = []
    for v in nearest_missing(variation, package_train, have, NEAREST):
        row = task_row(sim, "train", name, v)
        data = {"task_name": name, "variation": v, "max_steps": types[name]["budget"]}
        task = Task(row["id"], "sciworld", "train", row["instruction"], data)
        out.append(Candidate(task, {"task_name": name, "variation": v, "near": variation}))
    return out


def task_key(task: Task) -> str:
    return f"{task.data.get('task_name')}-{task.data.get('variation')}"
