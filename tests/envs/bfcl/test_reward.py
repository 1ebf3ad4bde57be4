"""The env's verdict against the package's own `multi_turn_checker`, on the ground truth and on
corrupted ground truth, over a sample of every category's entries.

The package's checker `eval`s the call strings it is given: here they are the package's own
ground truth or a test-made variant of it, never an agent's text.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import pytest

from coevo.envs.bfcl import BfclEnv, data
from coevo.envs.bfcl.calls import Call, parse_calls
from coevo.envs.conversation import replay
from tests.envs.bfcl.conftest import NEEDS_PACKAGE

pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)

Script = list[list[str]]  # the call strings of each user turn (one step per turn here)


def package_verdict(entry: dict, turns: Script, label: str) -> dict:
    """The package's checker on `turns`; its instances (module globals) are removed after."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    test_entry = {
        "id": entry["entry_id"],
        "initial_config": copy.deepcopy(entry["initial_config"]),
        "involved_classes": entry["involved_classes"],
    }
    decoded = [[calls] if calls else [] for calls in turns]
    model = f"coevo_test_{label}"
    try:
        return multi_turn_checker(
            decoded, entry["ground_truth"], test_entry, f"multi_turn_{entry['category']}", model
        )
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model)]:
            del vars(multi_turn_utils)[key]


def env_verdict(env: BfclEnv, entry: dict, turns: Script) -> tuple[float, dict]:
    script = []
    for calls in turns:
        if calls:
            script.append("Action: [" + ", ".join(calls) + "]")
        script.append("Action: answer[done]")
    trajectory = replay(env, data.task_of(entry, "train"), script)
    assert trajectory.terminated
    return trajectory.reward, trajectory.metadata["info"]["checker"]


def _last_turn_with_calls(turns: Script) -> int:
    return max(i for i, calls in enumerate(turns) if calls)


def drop_last_call(turns: Script) -> Script:
    i = _last_turn_with_calls(turns)
    return [calls[:-1] if j == i else calls for j, calls in enumerate(turns)]


def drop_first_turn(turns: Script) -> Script:
    i = min(i for i, calls in enumerate(turns) if calls)
    return [[] if j == i else calls for j, calls in enumerate(turns)]


def change_a_string(turns: Script) -> Script:
    """The last call of the entry with a string argument changed (or its first one dropped)."""
    out = [list(calls) for calls in turns]
    for i in reversed(range(len(out))):
        for k in reversed(range(len(out[i]))):
            (call,) = parse_calls(out[i][k])
            for name, value in call.kwargs.items():
                if isinstance(value, str):
                    out[i][k] = str(Call(call.name, call.args, {**call.kwargs, name: value + "_x"}))
                    return out
    return drop_last_call(turns)


def swap_turns(turns: Script) -> Script:
    """Each turn's calls one turn late (the state is wrong after the first)."""
    return [[], *turns[:-1]]


CORRUPTIONS: dict[str, Callable[[Script], Script]] = {
    "drop_last_call": drop_last_call,
    "drop_first_turn": drop_first_turn,
    "change_a_string": change_a_string,
    "swap_turns": swap_turns,
}


def sample() -> Iterator[dict]:
    """Every 10th entry of each category: 80 entries."""
    for category in data.CATEGORIES:
        yield from data.load_entries(category)[::10]


@pytest.fixture(scope="module")
def env() -> BfclEnv:
    return BfclEnv(n_test=20)


def test_ground_truth_passes_both_checkers(env: BfclEnv):
    for entry in sample():
        reward, checker = env_verdict(env, entry, entry["ground_truth"])
        assert package_verdict(entry, entry["ground_truth"], "truth")["valid"], entry["entry_id"]
        assert reward == 1.0 and checker["valid"], (entry["entry_id"], checker)


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupted_ground_truth_gets_the_packages_verdict(env: BfclEnv, corruption: str):
    failed = 0
    for entry in sample():
        turns = CORRUPTIONS[corruption](entry["ground_truth"])
        expected = package_verdict(entry, turns, corruption)
        reward, checker = env_verdict(env, entry, turns)
        assert checker["valid"] == expected["valid"], (entry["entry_id"], checker, expected)
        assert reward == float(expected["valid"])
        if not expected["valid"]:
            failed += 1
            assert checker["error_type"] == expected["error_type"], entry["entry_id"]
            assert checker["message"].startswith(expected["error_message"]), entry["entry_id"]
    assert failed >= 40, f"{corruption} should fail most entries, failed {failed} of 80"
