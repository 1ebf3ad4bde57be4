"""ScienceWorld synthesis on the real simulator: the nearest train variations the train set
lacks, verified by their gold paths (slow: a JVM)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coevo.envs.conversation import replay
from coevo.envs.evolve import exploration_task, tasks_from_exploration
from coevo.methods.agent_data.verify import verify

pytest.importorskip("scienceworld")
pytestmark = [pytest.mark.sciworld, pytest.mark.slow]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from coevo.envs.sciworld import SciWorldEnv
    from coevo.envs.sciworld.manifest import GoldCache

    env = SciWorldEnv()
    env.gold = GoldCache(tmp_path_factory.mktemp("sciworld") / "gold.jsonl")
    yield env
    env.close()


def test_sciworld_explorations_yield_missing_train_variations(env):
    task = next(t for t in env.tasks("train") if t.data["task_name"] == "find-animal")
    start = exploration_task(env, task, "Explore the kitchen.", "t")
    exploration = replay(env, start, ["Thought: I look.\nAction: look around"], agent="explorer")
    candidates = tasks_from_exploration(env, exploration)
    train = {
        t.data["variation"] for t in env.tasks("train") if t.data["task_name"] == "find-animal"
    }
    allowed = set(env.sim.variations("find-animal")["train"])
    assert candidates, "find-animal has train variations the train set lacks"
    for c in candidates:
        assert c.task.data["task_name"] == "find-animal" and c.task.split == "train"
        assert c.task.data["variation"] in allowed - train
    tests = env.tasks("test_seen") + env.tasks("test_unseen")
    checked = verify(env, candidates[:1], env.tasks("train"), tests)
    assert len(checked.accepted) + sum(checked.rejected.values()) == 1
    assert "test_overlap" not in checked.rejected and "duplicate" not in checked.rejected
