"""The `signatures` docs: one line per function, the same functions as the package's docs, in
a fifth of the prompt, and an expert that still passes with them."""

from __future__ import annotations

import json

import pytest

from coevo.envs.bfcl import BfclEnv
from coevo.envs.bfcl.docs import first_sentence, signature
from coevo.envs.conversation import expert_trajectory
from tests.envs.bfcl.conftest import NEEDS_PACKAGE, entry_task

pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)

SPLIT = "that you can invoke.\n"


def test_signatures_list_the_packages_functions_one_line_each(bfcl_env: BfclEnv):
    task = entry_task("multi_turn_base_0")
    bfcl_env.reset(task)
    full = json.loads(bfcl_env.instruction_prompt.split(SPLIT)[1])
    env = BfclEnv(docs="signatures")
    env.reset(task)
    prompt = env.instruction_prompt
    assert "functions in python format" in prompt
    lines = prompt.split(SPLIT)[1].strip().splitlines()
    functions = [line for line in lines if not line.startswith("# ")]
    assert [line.split("(")[0] for line in functions] == [d["name"] for d in full]
    assert len(lines) - len(functions) == len(task.data["involved_classes"])  # a head each
    assert len(prompt) < 0.25 * len(bfcl_env.instruction_prompt)
    assert expert_trajectory(env, task).reward == 1.0


def test_a_signature_has_types_defaults_options_and_one_sentence():
    doc = {
        "name": "setHeadlights",
        "description": "This tool belongs to the car. Tool description: Set the lights. "
        "Only when dark. Note that the provided function is in Python 3 syntax.",
        "parameters": {
            "type": "dict",
            "properties": {
                "mode": {"type": "string", "description": 'The mode. [Enum]: ["on", "off"]'},
                "level": {"type": "integer", "description": "How bright.", "default": 3},
                "doors": {"type": "array", "items": {"type": "string"}, "description": "Doors."},
                "note": {"type": "string", "description": "A note.", "default": "None"},
            },
            "required": ["mode", "doors"],
        },
    }
    assert signature(doc) == (
        "setHeadlights(mode: 'on'|'off', level: int = 3, doors: list[str], note: str = None)"
        "  # Set the lights."
    )
    assert first_sentence("Compute 2.5 times x. Then stop.") == "Compute 2.5 times x."


def test_functions_arriving_later_are_listed_as_signatures_too():
    env = BfclEnv(docs="signatures")
    trajectory = expert_trajectory(env, entry_task("multi_turn_miss_func_0"))
    assert trajectory.reward == 1.0
    arrivals = [t.text for t in trajectory.turns if t.role == "user" and "sort(file_name" in t.text]
    assert arrivals and "# the Gorilla file system." in arrivals[0]
