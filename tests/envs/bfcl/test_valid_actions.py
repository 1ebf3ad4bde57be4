"""bfcl's valid actions, what the explorers without a model choose from: calls of the listed
functions with arguments from the episode's state, that the env takes without a parse or
binding error, and random walks over them that reach varied states."""

from __future__ import annotations

import inspect
import random

import pytest

from coevo.envs.bfcl import BfclEnv, data
from coevo.envs.bfcl.calls import parse_answer, parse_calls
from coevo.envs.bfcl.docs import options
from coevo.envs.bfcl.evolve import ANSWER, MIN_STEPS
from coevo.envs.evolve import valid_actions
from coevo.envs.react import parse
from tests.envs.bfcl.conftest import NEEDS_PACKAGE, entry_task

pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)


def covering(env: BfclEnv) -> list:
    """Train tasks that between them involve every back-end."""
    chosen, seen = [], set()
    for task in env.tasks("train"):
        new = set(task.data["involved_classes"]) - seen
        if new:
            chosen.append(task)
            seen |= new
    assert seen == set(data.CLASSES)
    return chosen


def listed(env: BfclEnv) -> set[str]:
    """The function names the instruction prompt lists now (docs=signatures: one per line)."""
    lines = env.instruction_prompt.split("that you can invoke.\n", 1)[1].splitlines()
    return {line.split("(", 1)[0] for line in lines if "(" in line and not line.startswith("#")}


def test_every_offered_call_is_listed_binds_and_runs_without_a_refusal():
    env = BfclEnv(docs="signatures")
    offered = taken = 0
    for task in covering(env):
        env.reset(task)
        rng = random.Random(task.id)
        for _ in range(12):
            replies = valid_actions(env)
            if not replies:
                break
            names = listed(env)
            methods = env._episode.model.methods
            for reply in replies:
                action = parse(reply)
                assert action.ok, reply
                if parse_answer(action.action) is not None:
                    continue
                (call,) = parse_calls(action.action)  # no CallSyntaxError
                assert call.name in names, reply
                inspect.signature(methods[call.name][1]).bind(*call.args, **call.kwargs)
                offered += 1
            reply = rng.choice(replies)
            result = env.step(reply)
            taken += 1
            # The env refuses nothing: whatever went wrong went wrong inside the back-end.
            assert ": Error: " not in result.observation, (reply, result.observation)
            if result.done:
                break
    assert offered > 500 and taken > 50


def test_answer_comes_after_min_steps_calls_and_nothing_after_the_end():
    env = BfclEnv(docs="signatures")
    task = env.tasks("train")[0]
    env.reset(task)
    rng = random.Random(0)
    for _ in range(MIN_STEPS):
        replies = valid_actions(env)
        assert not any(ANSWER in r for r in replies)
        env.step(rng.choice(replies))
    answer = next(r for r in valid_actions(env) if ANSWER in r)
    for _ in task.data["turns"][:-1]:  # each answer ends a turn; the last one the episode
        env.step(answer)
        for _ in range(MIN_STEPS):
            env.step(rng.choice(valid_actions(env)))
    assert env.step(answer).terminated
    assert valid_actions(env) == []


def test_withheld_functions_are_offered_from_their_turn_on():
    env = BfclEnv(docs="signatures")
    task = entry_task("multi_turn_miss_func_0")
    (turn, names), *_ = task.data["missed_function"].items()
    env.reset(task)

    def called() -> set[str]:
        return {r.split("Action: [", 1)[1].split("(")[0] for r in valid_actions(env) if "[" in r}

    assert not called() & set(names)
    for _ in range(int(turn)):
        for _ in range(MIN_STEPS):
            env.step(valid_actions(env)[0])
        env.step(f"Action: {ANSWER}")
    assert set(names) <= called()


def test_arguments_come_from_the_state_and_the_docs():
    env = BfclEnv(docs="signatures")
    task = next(t for t in env.tasks("train") if "GorillaFileSystem" in t.data["involved_classes"])
    env.reset(task)
    here = env._episode.model.instances["GorillaFileSystem"]._current_dir.contents
    replies = [parse(r).action for r in valid_actions(env)]
    cds = [a for a in replies if a.startswith("[cd(")]
    assert cds and all(any(f"'{name}'" in a for name in here) for a in cds)
    car = next(t for t in env.tasks("train") if "VehicleControlAPI" in t.data["involved_classes"])
    env.reset(car)
    lights = [parse(r).action for r in valid_actions(env) if "setHeadlights" in r]
    assert lights and all(any(f"'{m}'" in a for m in ("on", "off", "auto")) for a in lights)
    assert options('The mode. [Enum]: ["on", "off"]') == ["on", "off"]
    assert options("Options are: economy, business, first.") == ["economy", "business", "first"]
    assert options("The name of the file.") == []


def test_random_walks_reach_varied_states_and_repeat_with_their_seed():
    env = BfclEnv(docs="signatures")
    task = next(t for t in env.tasks("train") if "GorillaFileSystem" in t.data["involved_classes"])

    def walk(seed: int) -> tuple[str, str]:
        env.reset(task)
        rng = random.Random(seed)
        actions = []
        for _ in range(8):
            reply = rng.choice(valid_actions(env))
            actions.append(parse(reply).action)
            env.step(reply)
        state = repr(sorted(vars(env._episode.model.instances["GorillaFileSystem"]).items()))
        return "\n".join(actions), state

    walks = [walk(seed) for seed in range(8)]
    assert walk(3) == walks[3]  # the same seed, the same walk
    assert len({actions for actions, _ in walks}) == 8
    assert len({state for _, state in walks}) >= 4  # files made, moved, removed differently
    called = {line.split("(")[0] for actions, _ in walks for line in actions.splitlines()}
    assert len(called) >= 15
