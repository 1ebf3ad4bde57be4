"""The explorers without a model (`random`, `guided`): only actions the env accepts, the same
walk from the same seed, plans read from the signals, and the valid-actions capability."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from coevo.envs.base import EnvError
from coevo.envs.conversation import expert_trajectory, observation_message, replay
from coevo.envs.evolve import (
    action_pattern,
    agent_actions,
    exploration_task,
    first_word,
    require,
    valid_actions,
)
from coevo.envs.react import FORMAT_ERROR, format_reply, parse
from coevo.methods.agent_data.explore import random_seeds
from coevo.methods.agent_data.walk import Plan, plan, rarity, walk, walks
from coevo.trajectory import Trajectory
from tests.toy_env import ToyEnv

ENVS = ("sql_env", "shop")


def stepped_again(env, t: Trajectory) -> list:
    """A walk's replies stepped again from its task's start: what the env made of each."""
    env.reset(t.task)
    return [env.step(reply) for reply in t.agent_texts]


def assert_accepted(env, t: Trajectory) -> None:
    assert t.metadata["refused"] == 0
    results = stepped_again(env, t)
    assert results and not [r.info.get("error") for r in results if r.info.get("error")]
    assert not [r for r in results if FORMAT_ERROR in r.observation]
    # The recorded observations are the env's own: the walk is a plain episode.
    shown = [turn.text for turn in t.turns[2::2]]
    assert shown == [observation_message(r.observation) for r in results[: len(shown)]]


@pytest.mark.parametrize("name", ENVS)
def test_random_walks_take_only_valid_actions_and_repeat_with_their_seed(name, request):
    env = request.getfixturevalue(name)
    seeds = random_seeds(env.tasks("train"), 4, 0, "w")
    played = walks(env, seeds, [Plan()] * 4, seed=1)
    for t in played:
        assert t.agent == "explorer" and t.metadata["explorer"] == "random"
        assert t.steps >= 3  # sql offers submit from the third step on; a purchase takes 3
        assert_accepted(env, t)
    again = walks(env, seeds, [Plan()] * 4, seed=1)
    assert [t.turns for t in again] == [t.turns for t in played]
    other = walks(env, seeds, [Plan()] * 4, seed=2)
    assert [t.turns for t in other] != [t.turns for t in played]


@pytest.mark.parametrize("name", ENVS)
def test_guided_walks_replay_a_prefix_then_vary_its_next_action(name, request):
    env = request.getfixturevalue(name)
    pattern = action_pattern(env)
    task = env.tasks("train")[0]
    actions = [a for _, a, _ in agent_actions(expert_trajectory(env, task))]
    # Branch where the expert described a table (sql) or opened a product (shop): there are
    # other tables and other products to take instead.
    k = next(i for i, a in enumerate(actions) if pattern(a) in ("DESC", "click:item"))
    p = Plan(tuple(actions[:k]), vary=pattern(actions[k]), avoid=actions[k], context="ctx")
    start = exploration_task(env, task, "ctx", "g")
    common = rarity([], pattern)
    t = walk(env, start, random.Random(0), plan=p, weight=common)
    taken = [parse(r).action for r in t.agent_texts]
    assert t.metadata["replayed"] == k and taken[:k] == actions[:k]
    assert pattern(taken[k]) == pattern(actions[k]) and taken[k] != actions[k]
    assert t.metadata["explorer"] == "guided"
    assert_accepted(env, t)
    same = walk(env, start, random.Random(0), plan=p, weight=common)
    assert same.turns == t.turns


def test_guided_choices_follow_the_pattern_weights(sql_env):
    task = sql_env.tasks("train")[0]
    weighted = Plan(weighted=True)
    only_show = walk(
        sql_env, task, random.Random(0), plan=weighted, weight=lambda p: float(p == "SHOW")
    )
    assert {parse(r).action for r in only_show.agent_texts} == {"SHOW TABLES"}

    # A rare signal's pattern is weighted up RARE_BOOST (4) times: SHOW TABLES against the
    # database's few DESC statements, over 20 walks of 10 steps.
    def share_of_show(p: Plan) -> float:
        kinds = []
        for seed in range(20):
            t = walk(sql_env, task, random.Random(seed), plan=p, weight=schema_only)
            kinds += [action_pattern(sql_env)(parse(r).action) for r in t.agent_texts]
        assert set(kinds) == {"SHOW", "DESC"}
        return kinds.count("SHOW") / len(kinds)

    def schema_only(p: str) -> float:
        return float(p in ("SHOW", "DESC"))

    assert share_of_show(Plan(weighted=True, boost="SHOW")) > 2 * share_of_show(weighted)


def test_rarity_weighs_a_pattern_by_the_share_of_trajectories_that_used_it():
    env = ToyEnv()
    task = env.tasks("train")[0]
    looked = replay(env, task, ["Action: look", "Action: look", "Action: type[x]"])
    typed = replay(env, task, ["Action: type[y]"])
    weight = rarity([looked, typed, typed, typed], first_word)
    assert weight("look") == pytest.approx(1 / (1 + 9 * 1 / 4))  # 1 of 4 used it (twice)
    assert weight("type") == pytest.approx(1 / (1 + 9 * 4 / 4))
    assert weight("jump") == 1.0


def test_plans_read_each_kind_of_signal():
    env = ToyEnv()
    task = env.tasks("train")[0]
    failed = replay(env, task, ["Action: look", "Action: look", "Action: type[zz]"])
    success = expert_trajectory(env, task)  # look, type[apple]
    rare = plan("rare", {"pattern": "type"}, [failed], None, first_word, random.Random(0))
    assert rare.prefix == ("look", "look") and rare.boost == "type" and rare.vary is None
    boundary = plan("boundary", {}, [failed, success], None, first_word, random.Random(0))
    assert boundary.prefix in ((), ("look",))  # a prefix of the success, never all of it
    for seed in range(4):
        forgot = plan("forgetting", {}, [failed], success, first_word, random.Random(seed))
        cut = len(forgot.prefix)
        assert forgot.prefix == ("look", "type[apple]")[:cut] and cut < 2
        assert forgot.avoid == ("look", "type[apple]")[cut] and forgot.vary == first_word(
            forgot.avoid
        )
    assert all(p.context for p in (rare, boundary, forgot))


def test_a_prefix_that_fails_is_replayed_only_up_to_its_first_error():
    class Walkable(ToyEnv):
        def valid_actions(self):
            return [format_reply("I look.", "look"), format_reply("I type it.", "type[a]")]

        def step(self, action):
            result = super().step(action)
            if result.observation.startswith("Invalid action"):  # the envs' convention
                result = replace(result, info={**result.info, "error": "invalid"})
            return result

    env = Walkable()
    task = env.tasks("train")[0]
    t = walk(env, task, random.Random(0), plan=Plan(("look", "jump", "look")))
    assert t.metadata["replayed"] == 1 and parse(t.agent_texts[0]).action == "look"
    assert "jump" not in " ".join(t.agent_texts)
    assert valid_actions(env)[0].startswith("Thought: I look.")  # the env's own method


def test_an_env_without_valid_actions_says_so():
    require(ToyEnv())
    with pytest.raises(EnvError, match="valid_actions"):
        require(ToyEnv(), walk=True)
    with pytest.raises(EnvError, match="kind=llm"):
        valid_actions(ToyEnv())


def test_sql_offers_submit_only_after_three_steps_and_a_result(sql_env):
    task = sql_env.tasks("train")[0]
    sql_env.reset(task)
    submit = format_reply("The last result answers a question; I submit it.", "submit")
    for _ in range(3):
        assert submit not in valid_actions(sql_env)
        sql_env.step("Action: SHOW TABLES")
    assert submit in valid_actions(sql_env)
    sql_env.step("Action: SELECT 1 WHERE 0")  # no rows: nothing to submit
    assert submit not in valid_actions(sql_env)
    sql_env.step("Action: submit")
    assert valid_actions(sql_env) == []  # the episode is over


def test_guided_walks_end_as_often_as_random_ones_whatever_the_weights(shop):
    """Every rollout of a round buys, so rarity weighs the purchase down: without its uniform
    share a guided walk would seldom end in one, and only a purchase makes a shop task."""
    from coevo.methods.agent_data.walk import ending_patterns

    pattern = action_pattern(shop)
    tasks = shop.tasks("train")[:20]
    experts = [expert_trajectory(shop, task) for task in tasks]
    ending = ending_patterns(experts, pattern)
    assert ending == {pattern("click[buy now]")}
    weight = rarity(experts, pattern)
    assert weight(pattern("click[buy now]")) == pytest.approx(0.1)

    def bought(**how) -> list[bool]:
        played = [walk(shop, t, random.Random(i), **how) for i, t in enumerate(tasks)]
        return [t.terminated for t in played]

    # A plan that is not a rare signal's walks uniformly, as the random explorer does.
    assert bought(weight=weight) == bought()
    rare = Plan(weighted=True)
    kept, weighed_down = (
        bought(weight=weight, ending=ending, plan=rare),
        bought(weight=weight, plan=rare),
    )
    assert sum(kept) > sum(weighed_down)
