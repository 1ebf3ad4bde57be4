"""agent_data on sql with the explorers without a model (`random`, `guided`) on a nano agent:
a round verifies tasks found by the walks, they join the next batch, and the round's record
(the stage's manifest, which `coevo compare` and `coevo report` read) has its counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevo.config import ConfigError, build, load
from coevo.methods.runner import execute
from coevo.run.recipe import RunConfig
from coevo.store import Store
from tests.methods.test_grpo import GRPO
from tests.methods.test_run import FAST, ROOT

SQL = {"n_train": 16, "n_test_seen": 4, "n_test_unseen": 4, "max_steps": 5}
AGENT_DATA = {"synthesis_every": 1, "theta": 50.0, "explorations": 3, "mixture": 0.5}


def values(kind: str, cache: Path | None = None, **more) -> dict:
    """The recipe: sql's databases from the session's cache (`sql_cache`), when given."""
    options = {**SQL, **({"cache_dir": str(cache)} if cache else {})}
    return {
        **FAST,
        "env": {"name": "sql", "options": options},
        "model": {**FAST["model"], "max_length": 1024},
        "sft": {**FAST["sft"], "epochs": 2},
        "method": "agent_data",
        "grpo": {**GRPO, "steps": 2, "eval_every": 2, "checkpoints": {"keep_stage_ends": True}},
        "agent_data": {**AGENT_DATA, "explorer": {"kind": kind}},
        **more,
    }


@pytest.fixture(scope="module")
def random_run(tmp_path_factory, sql_cache) -> Path:
    out = tmp_path_factory.mktemp("walk") / "random"
    return execute(build(RunConfig, values("random", sql_cache)), out, quiet=True)


def store_rows(run: Path) -> list:
    with Store(run, create=False) as store:
        return list(store.stored_trajectories(stage="evolve-1"))


def round_summary(run: Path) -> dict:
    return json.loads((run / "stages/evolve-1/manifest.json").read_text())["outputs"]


def test_a_random_round_on_sql_verifies_tasks_that_join_the_next_batch(random_run):
    summary = round_summary(random_run)
    assert summary["explorer"] == "random" and summary["explorations"] == 3
    assert summary["verified"] >= 1
    rejected = sum(summary["rejected"].values())
    assert summary["verified"] + rejected == summary["candidates"]
    assert summary["batch_share"] == 0.0 and summary["next_batch_share"] == 0.5
    assert set(summary["signals"]) == {"forgetting", "boundary", "rare"}
    with Store(random_run, create=False) as store:
        made = store.synthesized()
        explorations = store.trajectories(stage="evolve-1")
        step2 = {t.task.id for t in store.trajectories(stage="grpo-2", iteration=2)}
    assert len(made) == summary["verified"]
    assert all(r.provenance["signal"] is None for r in made)  # random: no signal
    assert all(t.metadata["explorer"] == "random" for t in explorations)
    # Each task's gold query is one its exploration ran, asked as the walk's thought asked it.
    ran = {t.id: t for t in store_rows(random_run)}
    for r in made:
        walked = ran[r.provenance["exploration"]].trajectory
        assert any(r.task.data["query"] in text for text in walked.agent_texts)
        assert r.provenance["question"] == "explorer"
    assert len(step2 & {r.task.id for r in made}) == min(2, len(made))  # 0.5 of 4 tasks


def test_a_guided_round_starts_from_the_signals(random_run, sql_cache, tmp_path):
    run = execute(
        build(RunConfig, values("guided", sql_cache, init_from=str(random_run))),
        tmp_path / "guided",
        quiet=True,
    )
    summary = round_summary(run)
    assert summary["explorer"] == "guided" and summary["explorations"] == 3
    # Step 1, before the round, is the random run's: adopted with its kept checkpoint, so
    # the round sees the same signals.
    grpo_1 = json.loads((run / "stages/grpo-1/manifest.json").read_text())
    assert grpo_1["adopted_from"] == str(random_run)
    assert summary["signals"] == round_summary(random_run)["signals"]
    assert summary["verified"] >= 1
    with Store(run, create=False) as store:
        explorations = store.trajectories(stage="evolve-1")
        made = store.synthesized()
    assert all(t.metadata["explorer"] == "guided" for t in explorations)
    # One exploration per signalled task (the rest start at random train tasks: `1-r-<i>`).
    from_signals = [t for t in explorations if not t.task.id.startswith("explore/1-r-")]
    assert bool(from_signals) == (sum(summary["signals"].values()) > 0)
    assert all(r.provenance["context"] for r in made if r.provenance["signal"] is not None)


def test_the_explorer_kind_is_one_override_and_its_mistakes_name_the_setting():
    for env in ("shop", "sql"):
        for kind in ("random", "guided"):
            path = ROOT / f"configs/{env}/agent_data.yaml"
            load(RunConfig, path, [f"agent_data.explorer.kind={kind}"]).validate()
    with pytest.raises(ConfigError, match="explorer.kind"):
        build(RunConfig, values("wander"))
    named = {**AGENT_DATA, "explorer": {"kind": "random", "name": "x"}}
    with pytest.raises(ConfigError, match="without a model"):
        build(RunConfig, values("random", agent_data=named)).validate()
    section = {**AGENT_DATA, "random_exploration": True, "explorer": {"kind": "guided"}}
    with pytest.raises(ConfigError, match="kind=random"):
        build(RunConfig, values("guided", agent_data=section)).validate()
