"""The functions the agent is shown, against the package's own prompt and function lists.

The package's prompt helpers create result folders where they are imported (under
BFCL_PROJECT_ROOT), so they run in a child process pointed at a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coevo.envs.bfcl import BfclEnv
from coevo.envs.conversation import expert_trajectory
from tests.envs.bfcl.conftest import NEEDS_PACKAGE, entry_task

pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)

ADDED = "I have updated some more functions you can choose from. What about now?"
TOOLS = "Here is a list of functions in json format that you can invoke.\n"
CHILD = """
import json, sys
from bfcl_eval.constants.default_prompts import DEFAULT_SYSTEM_PROMPT_FORMAT
from bfcl_eval.model_handler.utils import formulate_system_prompt
from bfcl_eval.utils import load_dataset_entry

out = {}
for category in ("multi_turn_base", "multi_turn_long_context", "multi_turn_miss_func"):
    for entry in load_dataset_entry(category)[:12]:
        out[entry["id"]] = {
            "prompt": formulate_system_prompt(DEFAULT_SYSTEM_PROMPT_FORMAT, entry["function"]),
            "missed": entry.get("missed_function", {}),
        }
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def package_prompts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("bfcl-root")
    env = {**os.environ, "BFCL_PROJECT_ROOT": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_tools_are_the_packages_list_in_its_format(package_prompts: dict, tmp_path: Path):
    env = BfclEnv()
    assert len(package_prompts) == 36
    for entry_id, theirs in package_prompts.items():
        env.reset(entry_task(entry_id))
        ours = env.instruction_prompt
        assert ours.split(TOOLS)[1] == theirs["prompt"].split(TOOLS)[1], entry_id
        # BFCL's persona, task and multi-turn rule are ours too (its no-other-text rule is not:
        # the agent writes a thought).
        for paragraph in theirs["prompt"].split(TOOLS)[0].split("\n\n"):
            if "SHOULD NOT include" not in paragraph and "only return" not in paragraph:
                for sentence in paragraph.replace("functions.You", "functions. You").split(". "):
                    assert sentence.strip() in ours, (entry_id, sentence)


def test_withheld_functions_arrive_in_the_packages_words(package_prompts: dict):
    env = BfclEnv()
    for entry_id, theirs in package_prompts.items():
        if not theirs["missed"]:
            continue
        trajectory = expert_trajectory(env, entry_task(entry_id))
        observations = [t.text.removeprefix("Observation: ") for t in trajectory.turns[2::2]]
        arrivals = [o for o in observations if ADDED in o]
        assert len(arrivals) == len(theirs["missed"]), entry_id
        for arrival, docs in zip(arrivals, theirs["missed"].values(), strict=True):
            assert arrival == f"User: {json.dumps(docs, indent=4)}\n{ADDED}", entry_id
