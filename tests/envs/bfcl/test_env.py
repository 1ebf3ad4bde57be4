"""BfclEnv on the real package: splits, prompt, turns, miss_func, bad and hostile calls, budget,
determinism and concurrent episodes."""

from __future__ import annotations

import gc
import json
import time
import weakref
from pathlib import Path

import pytest

from coevo.envs import SPLITS, EnvError, EpisodeFinishedError, make
from coevo.envs.bfcl import BfclEnv
from coevo.envs.bfcl.env import DONE
from coevo.envs.check import check_env
from coevo.envs.conversation import expert_trajectory, replay
from coevo.envs.react import FORMAT_ERROR, parse
from coevo.trajectory import Task
from tests.envs.bfcl.conftest import NEEDS_PACKAGE, entry_task

pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)

ADDED = "I have updated some more functions you can choose from. What about now?"


def _scenario(task: Task) -> int:
    return int(task.data["entry_id"].rsplit("_", 1)[1])


def test_registry_builds_it_and_the_checker_passes_on_every_split(bfcl_env: BfclEnv):
    assert isinstance(make("bfcl", n_test=20), BfclEnv)
    report = check_env(bfcl_env, tasks_per_split=30)
    assert report.ok, [(r.name, r.problems) for r in report.failures]
    assert report.results["expert reaches 1.0"].passed == 90


def test_splits_hold_out_whole_scenarios(bfcl_env: BfclEnv):
    train, seen, unseen = (bfcl_env.tasks(s) for s in SPLITS)
    assert (len(train), len(seen), len(unseen)) == (150, 50, 150)
    assert {t.data["category"] for t in train + seen} == {"base"}
    assert [t.data["category"] for t in unseen[:3]] == ["long_context", "miss_func", "miss_param"]
    held = {_scenario(t) for t in seen}
    assert {_scenario(t) for t in unseen} == held
    assert not held & {_scenario(t) for t in train}
    assert len({t.id for t in train + seen + unseen}) == 350
    json.dumps([t.to_dict() for t in train + unseen])  # task data is JSON
    again, other = BfclEnv(seed=0), BfclEnv(seed=1)
    assert [t.id for t in again.tasks("train")] == [t.id for t in train]
    assert [t.id for t in other.tasks("train")] != [t.id for t in train]


def test_bad_options_and_tasks_are_clear_errors(bfcl_env: BfclEnv):
    for options in ({"n_test": 0}, {"n_test": 200}, {"max_steps": 1}, {"reward": "best"},
                    {"max_result_chars": 0}, {"docs": "xml"}):  # fmt: skip
        with pytest.raises(EnvError):
            BfclEnv(**options)
    with pytest.raises(EnvError, match="not a bfcl task"):
        bfcl_env.reset(Task("sql/x", "sql", "train", "q", {"db_id": "a", "query": "SELECT 1"}))
    task = bfcl_env.tasks("train")[0]
    broken = Task(task.id, "bfcl", "train", "q", {**task.data, "involved_classes": ["Shell"]})
    with pytest.raises(EnvError, match="unknown bfcl back-ends"):
        bfcl_env.reset(broken)
    truth = [["ls()", "cd(folder=__import__('os').getcwd())"], *task.data["ground_truth"][1:]]
    hostile = Task(task.id, "bfcl", "train", "q", {**task.data, "ground_truth": truth})
    with pytest.raises(EnvError, match="not one literal call"):
        bfcl_env.reset(hostile)
    with pytest.raises(EnvError, match="before reset"):
        BfclEnv(n_test=20).step("Action: answer[hi]")


def test_the_prompt_lists_the_tasks_functions_as_the_package_does(bfcl_env: BfclEnv):
    assert "once a task starts" in BfclEnv().instruction_prompt
    task = entry_task("multi_turn_miss_func_0")  # TwitterAPI + GorillaFileSystem, sort withheld
    bfcl_env.reset(task)
    prompt = bfcl_env.instruction_prompt
    assert prompt.startswith("You are an expert in composing functions.")
    assert "[func_name1(params_name1=params_value1" in prompt
    tools = prompt.split("Here is a list of functions in json format that you can invoke.\n")[1]
    docs = json.loads(tools)
    names = [d["name"] for d in docs]
    assert "post_tweet" in names and "cd" in names and "sort" not in names
    assert all(d["description"].endswith("Python 3 syntax.") for d in docs)


def test_turns_progress_on_answers_and_the_expert_scores_one(bfcl_env: BfclEnv):
    task = entry_task("multi_turn_base_0")
    turns = task.data["turns"]
    observation, info = bfcl_env.reset(task)
    assert observation == "User: " + turns[0][0] and info["turns"] == len(turns)
    result = bfcl_env.step("Thought: go.\nAction: [cd(folder='document'), mkdir(dir_name='temp')]")
    assert result.observation.splitlines() == [
        'cd(folder=\'document\'): {"current_working_directory": "document"}',
        "mkdir(dir_name='temp'): None",
    ]
    assert (result.reward, result.done, result.info["turn"]) == (0.0, False, 0)
    result = bfcl_env.step("Thought: done.\nAction: answer[The folder is made.]")
    assert result.observation == "User: " + turns[1][0] and not result.done
    assert bfcl_env.step("Action: ls()").info["turn"] == 1
    trajectory = expert_trajectory(bfcl_env, task)
    assert trajectory.reward == 1.0 and trajectory.terminated
    assert trajectory.metadata["final_observation"] == DONE
    assert trajectory.metadata["info"]["turn_pass_share"] == 1.0
    for reply in bfcl_env.expert(task):  # one-line thoughts, actions the env parses
        thought, action = reply.text.split("\n")
        assert thought.startswith("Thought: ") and parse(reply.text).action == action[8:]


def test_miss_func_withholds_the_functions_until_their_turn(bfcl_env: BfclEnv):
    task = entry_task("multi_turn_miss_func_0")
    assert task.data["missed_function"] == {"3": ["sort"]} and task.data["turns"][3] == []
    trajectory = expert_trajectory(bfcl_env, task)
    assert trajectory.reward == 1.0
    observations = [t.text for t in trajectory.turns if t.role == "user"]
    arrival = [o for o in observations if ADDED in o]
    assert len(arrival) == 1 and '"name": "sort"' in arrival[0]
    assert not any('"name": "sort"' in o for o in observations[: observations.index(arrival[0])])
    # The expert says it cannot at the turn whose function is missing (ground truth: no calls).
    assert task.data["ground_truth"][2] == []


def test_bad_calls_are_observations_and_the_episode_goes_on(bfcl_env: BfclEnv):
    bfcl_env.reset(entry_task("multi_turn_base_0"))
    cases = {
        "Action: [fly(to='moon')]": "no function named 'fly'",
        "Action: answer(text='done')": "answer[<your reply>]",
        "Action: cd(path='x')": "takes (folder)",
        "Action: cd()": "missing a required argument",
        "Action: cd('a', 'b')": "too many positional arguments",
        "Action: cd(folder=['not', 'a', 'string'])": "Error during execution",
        "Action: [cd(folder=x)]": "not a literal value",
        "Action: []": "empty list",
        "Thought: only thinking": FORMAT_ERROR,
    }
    for action, expected in cases.items():
        result = bfcl_env.step(action)
        assert expected in result.observation, (action, result.observation)
        assert result.info["error"] and not result.done
    # A valid call after the errors still runs: one bad call does not cancel its neighbours.
    result = bfcl_env.step("Action: [nope(), pwd()]")
    assert "nope(): Error" in result.observation and "pwd(): " in result.observation


def test_hostile_calls_reach_nothing_outside_the_tools(bfcl_env: BfclEnv, tmp_path: Path):
    sentinel = tmp_path / "pwned"
    payload = f"import pathlib; pathlib.Path({str(sentinel)!r}).touch()"
    bfcl_env.reset(entry_task("multi_turn_base_0"))
    attacks = [
        f"exec({payload!r})",
        f"eval({payload!r})",
        f"__import__('os').system('touch {sentinel}')",
        "_load_scenario({})",
        "_navigate_to_directory('/')",
        "__init__()",
        f"[ls(), exec({payload!r})]",
        f"open({str(sentinel)!r}, 'w')",
        "getattr(ls, '__globals__')",
        "(lambda: ls())()",
        "ls.__self__._load_scenario({})",
        "globals()",
    ]
    for attack in attacks:
        result = bfcl_env.step(f"Action: {attack}")
        assert result.info["error"] and not result.done, attack
    assert not sentinel.exists()
    state = bfcl_env.step("Action: pwd()").observation
    assert "workspace" in state  # the back-end is where it was: nothing was reloaded


def test_costly_arguments_are_refused_and_precision_is_restored(bfcl_env: BfclEnv):
    import decimal

    import mpmath

    task = next(t for t in bfcl_env.tasks("train") if "MathAPI" in t.data["involved_classes"])
    bfcl_env.reset(task)
    dps, prec = mpmath.mp.dps, decimal.getcontext().prec
    start = time.perf_counter()
    result = bfcl_env.step("Action: [logarithm(value=2, base=3, precision=1000000)]")
    assert "above this env's limit" in result.observation
    result = bfcl_env.step("Action: [power(base=7, exponent=10**9)]")  # not a literal either
    assert "not a literal" in result.observation
    result = bfcl_env.step("Action: [power(base=7, exponent=1000000000)]")
    assert "above this env's limit" in result.observation
    assert time.perf_counter() - start < 5
    result = bfcl_env.step("Action: [logarithm(value=2, base=3, precision=40), "
                           "square_root(number=2, precision=30)]")  # fmt: skip
    assert "1.41421356237309504880168872" in result.observation
    assert (mpmath.mp.dps, decimal.getcontext().prec) == (dps, prec)


def test_the_budget_is_per_user_turn_and_running_out_fails_the_entry():
    env = BfclEnv(max_steps=3)
    task = entry_task("multi_turn_base_0")
    env.reset(task)
    for _ in range(2):
        assert not env.step("Action: pwd()").done
    assert not env.step("Action: answer[next]").done  # the third step of turn 0 ends it
    assert not env.step("Action: pwd()").done  # step 4 of the episode, 1 of turn 1
    assert not env.step("Action: pwd()").done
    result = env.step("Action: pwd()")
    assert result.truncated and not result.terminated and result.reward == 0.0
    checker = result.info["checker"]
    assert checker["error_type"] == "multi_turn:force_terminated"
    assert checker["turns"][-1] == {
        "turn": 1,
        "checked": True,
        "passed": False,
        "error_type": "multi_turn:force_terminated",
        "message": "Model was force-terminated: turn 1 used all its steps.",
    }
    with pytest.raises(EpisodeFinishedError):
        env.step("Action: pwd()")


def test_turn_pass_share_grades_failures_and_can_be_the_reward():
    task = entry_task("multi_turn_base_0")
    truth = task.data["ground_truth"]
    script = []
    for i, calls in enumerate(truth):
        if calls and i != len(truth) - 1:  # every turn right but the last
            script.append("Action: [" + ", ".join(calls) + "]")
        script.append("Action: answer[ok]")
    checked = sum(1 for calls in truth if calls)
    for kind in ("entry", "turns"):
        trajectory = replay(BfclEnv(reward=kind), task, script)
        info = trajectory.metadata["info"]
        assert info["checker"]["valid"] is False
        assert info["checker"]["error_type"] == "multi_turn:empty_turn_model_response"
        assert info["turn_pass_share"] == pytest.approx((checked - 1) / checked)
        expected = 0.0 if kind == "entry" else (checked - 1) / checked
        assert trajectory.reward == pytest.approx(expected)


def test_replays_are_identical(bfcl_env: BfclEnv):
    task = entry_task("multi_turn_base_20")
    script = ["Action: ls()", "Action: [nope()]", "Action: answer[x]", "Action: cd(folder='..')",
              "garbage", "Action: answer[y]"] + [t.text for t in bfcl_env.expert(task)]  # fmt: skip
    first, second = (replay(bfcl_env, task, script) for _ in range(2))
    assert first.turns == second.turns and first.metadata == second.metadata


def test_concurrent_episodes_keep_their_own_state_and_release_it():
    task = entry_task("multi_turn_base_0")
    a, b = BfclEnv(n_test=20), BfclEnv(n_test=20)
    a.reset(task)
    b.reset(task)
    a.step("Action: [mkdir(dir_name='only_in_a')]")
    assert "only_in_a" in a.step("Action: ls()").observation
    assert "only_in_a" not in b.step("Action: ls()").observation
    # Both play the expert step by step, interleaved, on the same and on another entry.
    other = entry_task("multi_turn_base_1")
    scripts = {a: (task, a.expert(task)), b: (other, b.expert(other))}
    finals = {}
    for env, (t, _) in scripts.items():
        env.reset(t)
    for i in range(max(len(s) for _, s in scripts.values())):
        for env, (_, script) in scripts.items():
            if i < len(script):
                finals[env] = env.step(script[i].text)
    assert all(r.reward == 1.0 and r.terminated for r in finals.values())
    # The back-end instances go with the episode.
    a.reset(task)
    alive = [weakref.ref(i) for i in a._episode.model.instances.values()]
    for reply in a.expert(task):
        a.step(reply.text)
    gc.collect()
    assert alive and all(ref() is None for ref in alive)


def test_action_patterns_are_function_names(bfcl_env: BfclEnv):
    pattern = bfcl_env.action_pattern
    assert pattern("Thought: x\nAction: [cd(folder='a'), ls(), cd(folder='b')]") == "cd+ls"
    assert pattern("Action: answer[done]") == "answer"
    assert pattern("Action: cd folder") == "invalid" == pattern("no action at all\n\nThought:")


def test_long_results_can_be_cut_for_the_agent_only():
    env = BfclEnv(max_result_chars=20)
    task = entry_task("multi_turn_long_context_0")
    env.reset(task)
    result = env.step("Action: ls(a=True)")
    assert "characters, cut]" in result.observation
    assert expert_trajectory(env, task).reward == 1.0  # the checker sees whole results


def test_compact_docs_list_the_same_functions_in_less_text(bfcl_env: BfclEnv):
    task = entry_task("multi_turn_miss_func_0")
    bfcl_env.reset(task)
    full = json.loads(bfcl_env.instruction_prompt.split("that you can invoke.\n")[1])
    env = BfclEnv(docs="compact")
    env.reset(task)
    prompt = env.instruction_prompt
    compact = json.loads(prompt.split("that you can invoke.\n")[1])
    assert compact == [{k: v for k, v in d.items() if k != "response"} for d in full]
    assert len(prompt) < 0.6 * len(bfcl_env.instruction_prompt)
    trajectory = expert_trajectory(env, task)
    assert trajectory.reward == 1.0
    assert any('{"name":"sort"' in t.text for t in trajectory.turns if t.role == "user")
