"""Synthesis from recorded explorations of each env, and the envs' action patterns."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from coevo.envs.conversation import replay
from coevo.envs.evolve import action_pattern, exploration_task, task_key, tasks_from_exploration
from coevo.envs.shop.goals import make_goal
from coevo.methods.agent_data.synthesize import synthesize
from coevo.methods.agent_data.verify import verify
from coevo.trajectory import Task
from tests.toy_env import ToyEnv


def explored(env, task: Task, replies: list[str]):
    """A recorded exploration: `replies` played from `task`'s start under an exploration
    instruction, as the explorer plays them."""
    start = exploration_task(env, task, "Explore the tools.", "t")
    return replay(env, start, replies, agent="explorer")


# -- shop ---------------------------------------------------------------------------------


def untargeted_goal(shop) -> Task:
    """A goal for a product no task of any split targets (what an explorer may buy)."""
    targeted = {
        t.data["asin"] for s in ("train", "test_seen", "test_unseen") for t in shop.tasks(s)
    }
    rng = random.Random(0)
    for pid in range(1, len(shop.catalog) + 1):  # ids are 1-based
        product = shop.catalog.product(pid)
        if product.asin not in targeted and product.options:
            goal = make_goal(product, rng)
            return Task("shop/x", "shop", "train", goal.pop("instruction"), goal)
    raise AssertionError("every product is targeted")


def test_shop_turns_a_purchase_into_a_verified_goal(shop):
    goal = untargeted_goal(shop)
    exploration = explored(shop, goal, [t.text for t in shop.expert(goal)])
    assert exploration.metadata["info"]["page"] == "done"
    (candidate,) = tasks_from_exploration(shop, exploration)
    assert candidate.task.data["asin"] == goal.data["asin"]
    assert candidate.origin["chosen"] == exploration.metadata["info"]["chosen"]
    assert candidate.task.instruction != goal.instruction  # the explorer never saw the goal
    tests = shop.tasks("test_seen") + shop.tasks("test_unseen")
    checked = verify(shop, [candidate], shop.tasks("train"), tests)
    assert checked.accepted == [candidate] and checked.rejected == {}


def test_shop_buying_a_test_target_is_rejected_and_no_purchase_gives_nothing(shop):
    test_task = shop.tasks("test_seen")[0]
    exploration = explored(shop, test_task, [t.text for t in shop.expert(test_task)])
    candidates = tasks_from_exploration(shop, exploration)
    checked = verify(shop, candidates, shop.tasks("train"), shop.tasks("test_seen"))
    assert checked.accepted == [] and checked.rejected == {"test_overlap": 1}
    browsing = explored(shop, test_task, ["Action: search[red shoes]"])
    assert tasks_from_exploration(shop, browsing) == []


def test_shop_action_patterns(shop):
    pattern = action_pattern(shop)
    assert pattern("search[red shoes]") == "search"
    assert pattern("click[next >]") == "click:next"
    assert pattern("click[Buy Now]") == "click:buy"
    assert pattern("click[B012345678]") == "click:item"
    assert pattern("click[large]") == "click:option"
    assert pattern("click[features]") == "click:features"
    assert pattern("jump") == "invalid"


# -- sql ----------------------------------------------------------------------------------


def test_sql_tasks_are_executed_non_empty_queries_with_the_explorers_question(sql_env):
    task = sql_env.tasks("train")[0]
    table = task.data["tables"][0]
    replies = [
        "Thought: I look around.\nAction: SHOW TABLES",
        f"Thought: Task: List every row of the {table} table.\nAction: SELECT * FROM {table}",
        f"Thought: hostile\nAction: DROP TABLE {table}",
        f"Thought: empty\nAction: SELECT * FROM {table} WHERE 1 = 0",
        "Thought: broken\nAction: SELECT * FROM no_such_table",
        f"Thought: no question\nAction: SELECT COUNT(*) FROM {table}",
        f"Thought: again\nAction: SELECT * FROM {table}",
        "Action: submit",
    ]
    exploration = explored(sql_env, task, replies)
    candidates = tasks_from_exploration(sql_env, exploration)
    assert [c.task.data["query"] for c in candidates] == [
        f"SELECT * FROM {table}",
        f"SELECT COUNT(*) FROM {table}",
    ]
    assert candidates[0].task.instruction == f"List every row of the {table} table."
    assert candidates[0].origin["question"] == "explorer"
    assert candidates[1].origin["question"] == "template"
    assert f"SELECT COUNT(*) FROM {table}" in candidates[1].task.instruction
    assert all(c.task.data["db_id"] == task.data["db_id"] for c in candidates)
    assert candidates[0].task.data["tables"] == [table]
    tests = sql_env.tasks("test_seen") + sql_env.tasks("test_unseen")
    checked = verify(sql_env, candidates, sql_env.tasks("train"), tests)
    assert len(checked.accepted) + sum(checked.rejected.values()) == 2
    assert "unsolvable" not in checked.rejected and "nondeterministic" not in checked.rejected
    # The same query again (other spacing and case) is a duplicate of an accepted one.
    again = replace(candidates[0].task, id="sql/again", instruction="Show all rows of it.")
    again = replace(again, data={**again.data, "query": f"select *  from {table};"})
    known = sql_env.tasks("train") + [c.task for c in checked.accepted]
    if checked.accepted and checked.accepted[0] is candidates[0]:
        assert verify(sql_env, [type(candidates[0])(again)], known, tests).rejected == {
            "duplicate": 1
        }


def test_sql_action_patterns_are_statement_shapes(sql_env):
    pattern = action_pattern(sql_env)
    assert pattern("SELECT a FROM t JOIN u ON t.x = u.x GROUP BY a") == "SELECT+JOIN+GROUP BY"
    assert pattern("```sql\nselect count(*) from t where a in (select b from u)\n```") == (
        "SELECT+WHERE+SUBQUERY"
    )
    assert pattern("SHOW TABLES") == "SHOW" and pattern("DESC singer") == "DESC"
    assert pattern("submit") == "SUBMIT"
    assert task_key(sql_env, Task("a", "sql", "train", "q", {"db_id": "d", "query": "SELECT  1;"}))
    assert task_key(
        sql_env, Task("a", "sql", "train", "q", {"db_id": "d", "query": "SELECT  1;"})
    ) == task_key(sql_env, Task("b", "sql", "train", "r", {"db_id": "d", "query": "select 1"}))


# -- bfcl ---------------------------------------------------------------------------------


def test_bfcl_executed_calls_become_a_task_whose_truth_they_are(bfcl_env):
    task = bfcl_env.tasks("train")[0]
    replies = [t.text for t in bfcl_env.expert(task)][:1]
    replies.append("Thought: Task: Do those steps again.\nAction: [no_such_function()]")
    exploration = explored(bfcl_env, task, replies)
    assert task.data["turns"][0][0] not in exploration.turns[0].text  # goal-free
    assert "Explore the tools." in exploration.turns[0].text
    (candidate,) = tasks_from_exploration(bfcl_env, exploration)
    truth = [c for calls in task.data["ground_truth"][:1] for c in calls]
    assert candidate.task.data["ground_truth"] == [candidate.origin["calls"]]
    assert candidate.origin["calls"] == truth[: len(candidate.origin["calls"])]
    assert candidate.task.instruction == "Do those steps again."
    checked = verify(bfcl_env, [candidate], bfcl_env.tasks("train"), bfcl_env.tasks("test_seen"))
    assert checked.accepted == [candidate], checked.rejected


# -- sciworld -----------------------------------------------------------------------------


def test_sciworld_proposes_the_nearest_train_variations_the_train_set_lacks():
    from coevo.envs.sciworld.evolve import action_pattern as verb
    from coevo.envs.sciworld.evolve import nearest_missing

    assert nearest_missing(10, list(range(20)), {8, 9, 10, 11, 12}, 2) == [7, 13]
    assert nearest_missing(0, [0, 1], {0, 1}, 2) == []
    assert verb("focus on thermometer") == "focus on"
    assert verb("open door to kitchen") == "open"


# -- any env ------------------------------------------------------------------------------


def test_synthesis_names_candidates_and_a_broken_exploration_costs_only_itself():
    class Broken(ToyEnv):
        def tasks_from_exploration(self, trajectory):
            if trajectory.task.data["word"] == "banana":
                raise ValueError("cannot read this one")
            return super().tasks_from_exploration(trajectory)

    env = Broken()
    tasks = env.tasks("train")[:3]
    explorations = [explored(env, t, ["Action: look"]) for t in tasks]
    made = synthesize(env, explorations, [{"n": i} for i in range(3)], prefix="2")
    assert made.malformed == 1
    assert [c.task.id for c in made.candidates] == ["toy/synth/2-0", "toy/synth/2-1"]
    assert [c.origin["n"] for c in made.candidates] == [0, 2]
    assert all(c.task.split == "train" for c in made.candidates)


def test_an_env_without_synthesis_says_so():
    from coevo.envs.base import EnvError

    class Plain:
        name = "plain"

    with pytest.raises(EnvError, match="tasks_from_exploration"):
        tasks_from_exploration(Plain(), None)
