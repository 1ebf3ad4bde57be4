"""agent_data on bfcl with the explorers without a model (`random`, `guided`) on a nano agent:
a round's walks over the back-ends' valid calls give tasks that verify and join the next
batch; configs/bfcl/agent_data.yaml takes either kind as one override."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from coevo.config import build, load
from coevo.envs.bfcl import BfclEnv
from coevo.envs.bfcl.calls import parse_calls
from coevo.envs.conversation import expert_trajectory
from coevo.envs.evolve import exploration_task, tasks_from_exploration
from coevo.envs.react import parse
from coevo.methods.agent_data.explore import instruction
from coevo.methods.agent_data.verify import verify
from coevo.methods.agent_data.walk import Plan, walk
from coevo.methods.runner import execute
from coevo.run.recipe import RunConfig
from coevo.store import Store
from tests.envs.bfcl.conftest import NEEDS_PACKAGE
from tests.methods.agent_data.test_loop_walks import AGENT_DATA
from tests.methods.test_grpo import GRPO
from tests.methods.test_run import FAST, ROOT

pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)

BFCL = {"docs": "signatures", "max_result_chars": 200, "max_steps": 6}


def values(kind: str, **more) -> dict:
    return {
        **FAST,
        "env": {"name": "bfcl", "options": BFCL, "train_tasks": 8, "eval_tasks": 2},
        "model": {**FAST["model"], "max_length": 2048},
        "sft": {**FAST["sft"], "epochs": 2},
        "method": "agent_data",
        "grpo": {**GRPO, "steps": 2, "eval_every": 2},
        "agent_data": {**AGENT_DATA, "explorer": {"kind": kind}},
        **more,
    }


@pytest.fixture(scope="module")
def random_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bfcl-walk") / "random"
    return execute(build(RunConfig, values("random")), out, quiet=True)


def round_summary(run: Path) -> dict:
    return json.loads((run / "stages/evolve-1/manifest.json").read_text())["outputs"]


def check_round(run: Path, kind: str) -> dict:
    summary = round_summary(run)
    assert summary["explorer"] == kind and summary["explorations"] == 3
    assert summary["verified"] >= 1
    assert summary["verified"] + sum(summary["rejected"].values()) == summary["candidates"]
    assert summary["next_batch_share"] == 0.5
    with Store(run, create=False) as store:
        made = store.synthesized()
        explorations = store.trajectories(stage="evolve-1")
        step2 = {t.task.id for t in store.trajectories(stage="grpo-2", iteration=2)}
    assert len(made) == summary["verified"]
    assert all(t.metadata["explorer"] == kind for t in explorations)
    # The env refused none of the walks' calls (`refused` also counts the back-ends' own
    # exceptions, which a valid call may meet: a folder copied into itself, a missing key).
    assert not [u.text for e in explorations for u in e.turns[2::2] if ": Error: " in u.text]
    for r in made:  # one turn whose truth is calls the walk ran, each a call of the back-ends
        (truth,) = r.task.data["ground_truth"]
        walked = "\n".join(t.text for e in explorations for t in e.turns)
        assert truth and all(len(parse_calls(c)) == 1 and c in walked for c in truth)
    assert len(step2 & {r.task.id for r in made}) == min(2, len(made))  # 0.5 of 4 tasks
    return summary


def test_a_random_round_on_bfcl_verifies_tasks_that_join_the_next_batch(random_run):
    check_round(random_run, "random")


def test_a_guided_round_on_bfcl_verifies_tasks_too(random_run, tmp_path):
    run = execute(
        build(RunConfig, values("guided", init_from=str(random_run))),
        tmp_path / "guided",
        quiet=True,
    )
    check_round(run, "guided")


def test_the_bfcl_recipe_takes_either_explorer_kind():
    for kind in ("random", "guided"):
        path = ROOT / "configs/bfcl/agent_data.yaml"
        load(RunConfig, path, [f"agent_data.explorer.kind={kind}"]).validate()


def test_a_guided_walk_replays_an_attempts_calls_then_walks_on_to_a_task_that_verifies():
    """The nano agent of the runs above gives no signal; a plan as a boundary signal makes
    it: replay the first action of a successful attempt, then walk."""
    env = BfclEnv(docs="signatures")
    task = env.tasks("train")[0]
    first = parse(expert_trajectory(env, task).turns[1].text).action
    plan = Plan(prefix=(first,), context="replay up to 1 actions of an attempt, then branch")
    explore = exploration_task(env, task, instruction(plan.context), "t-0")
    walked = walk(env, explore, random.Random(0), plan=plan, weight=lambda pattern: 1.0)
    assert walked.metadata["replayed"] == 1
    assert parse(walked.turns[1].text).action == first
    (candidate,) = tasks_from_exploration(env, walked)
    (truth,) = candidate.task.data["ground_truth"]
    assert truth[: len(parse_calls(first))] == [str(c) for c in parse_calls(first)]
    checked = verify(env, [candidate], env.tasks("train"), env.tasks("test_seen"))
    assert checked.accepted == [candidate], checked.rejected
