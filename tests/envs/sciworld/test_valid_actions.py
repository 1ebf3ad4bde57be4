"""ScienceWorld's valid actions, what the explorers without a model choose from: the
simulator's own list, which the env takes (a JVM; its parser refuses a few of its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coevo.envs.evolve import valid_actions
from coevo.envs.react import parse
from coevo.methods.agent_data.explore import random_seeds
from coevo.methods.agent_data.walk import Plan, walks

pytest.importorskip("scienceworld")
pytestmark = pytest.mark.sciworld


@pytest.fixture(scope="module")
def env() -> Iterator:
    from coevo.envs.sciworld import SciWorldEnv

    env = SciWorldEnv()
    yield env
    env.close()


def test_random_walks_take_the_simulators_valid_actions(env):
    task = env.tasks("train")[0]
    env.reset(task)
    offered = [parse(r).action for r in valid_actions(env)]
    assert "look around" in offered and offered == sorted(offered)
    assert not [a for a in offered if a.startswith("focus on")]  # a wrong focus ends it
    seeds = random_seeds(env.tasks("train"), 2, 0, "w")
    played = walks(env, seeds, [Plan(), Plan()], seed=49)
    for t in played:
        env.reset(t.task)
        results = [env.step(reply) for reply in t.agent_texts]
        refused = [r for r in results if r.info.get("error")]
        assert results and len(refused) <= len(results) / 4
        assert t.metadata["refused"] == len(refused)
    if env.sim.deterministic:
        again = walks(env, seeds, [Plan(), Plan()], seed=49)
        assert [t.turns for t in again] == [t.turns for t in played]
