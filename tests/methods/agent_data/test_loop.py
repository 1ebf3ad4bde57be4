"""The agent_data method end to end on a nano model and the toy env: stages, signals, stored
and exported synthesized tasks, compare, no test leakage, and resume after kill -9."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
import yaml

from coevo.analysis.compare import compare
from coevo.config import ConfigError, build
from coevo.export import export, read_jsonl
from coevo.methods.agent_data.loop import mixture
from coevo.methods.runner import execute
from coevo.run.recipe import RunConfig
from coevo.run.records import EvolveRecord
from coevo.store import Store
from coevo.trajectory import Task
from tests.methods.kill import run_until_rows
from tests.methods.test_grpo import GRPO
from tests.methods.test_run import FAST, ROOT, manifest_times
from tests.toy_env import ToyEnv

AGENT_DATA = {
    "synthesis_every": 1,
    "theta": 50.0,  # 16 episodes a step: a pattern is rare below 8 of them
    "explorations": 3,
    "mixture": 0.5,
    "explorer": {"sampling": {"max_new_tokens": 24}, "reflect_tokens": 24},
}
VALUES = {
    **FAST,
    "model": {**FAST["model"], "max_length": 1024},  # room for the reflection prompt
    "method": "agent_data",
    "grpo": {**GRPO, "steps": 2, "eval_every": 2},
    "agent_data": AGENT_DATA,
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return execute(build(RunConfig, VALUES), tmp_path_factory.mktemp("ad") / "run", quiet=True)


def evolve_record(run: Path) -> EvolveRecord:
    manifest = json.loads((run / "stages/evolve-1/manifest.json").read_text())
    return EvolveRecord.from_dict(manifest["outputs"])


def test_stages_signals_and_counts(run_dir):
    stages = set(manifest_times(run_dir))
    assert {"sft-target", "eval-0", "grpo-1", "evolve-1", "grpo-2", "eval-2"} <= stages
    assert "evolve-2" not in stages and "eval-1" not in stages  # no round after the last step
    record = evolve_record(run_dir)
    assert record.steps == [1]
    assert set(record.signals) == {"forgetting", "boundary", "rare"}
    assert record.signals_per_step["1"] == record.signals
    assert record.signals["forgetting"] == 0  # step 1 has no history
    rejected = sum(record.rejected.values()) - record.rejected.get("malformed", 0)
    assert record.verified + rejected == record.candidates
    assert record.train_tasks == record.verified
    lines = (run_dir / "stages/evolve-1/signals.jsonl").read_text().splitlines()
    assert len(lines) == sum(record.signals.values())
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert {"grpo", "agent_data"} <= saved.keys() and "dpo" not in saved


def test_synthesized_tasks_are_stored_with_provenance_and_exported(run_dir, tmp_path):
    record = evolve_record(run_dir)
    with Store(run_dir, create=False) as store:
        made = store.synthesized()
        explorations = store.trajectories(stage="evolve-1")
        assert len(made) == record.verified
        assert len(explorations) == record.explorations
        for row in made:
            assert row.stage == "evolve-1" and row.round == 1 and row.task.split == "train"
            assert row.provenance["exploration"] in {
                s.id for s in store.stored_trajectories(stage="evolve-1")
            }
            assert row.provenance["signal"]["kind"] in ("boundary", "rare")
        # Step 2 mixed them into its batch (mixture 0.5 of 4 tasks).
        step2 = {t.task.id for t in store.trajectories(stage="grpo-2", iteration=2)}
        assert len(step2 & {r.task.id for r in made}) == min(2, len(made))
        written = export(store, "jsonl", tmp_path)
    if made:
        (synth,) = [w for w in written if w.what == "synthesized tasks"]
        rows = read_jsonl(synth.path)
        assert [r["id"] for r in rows] == [m.task.id for m in made]
        assert rows[0]["provenance"]["signal"]


def test_no_test_task_leaks_into_the_synthesized_tasks(run_dir):
    env = ToyEnv()
    tests = env.tasks("test_seen") + env.tasks("test_unseen")
    with Store(run_dir, create=False) as store:
        made = [r.task for r in store.synthesized()]
    ids = {t.id for t in tests}
    instructions = {t.instruction.lower() for t in tests}
    assert not [t for t in made if t.id in ids or t.instruction.lower() in instructions]


def test_compare_has_the_run_and_a_rerun_skips_every_stage(run_dir):
    from coevo.analysis.compare import to_markdown

    tables = compare([run_dir])
    assert "agent_data" in tables["rows"]
    (round_1,) = tables["rounds"]["agent_data"]
    assert round_1["round"] == 1 and round_1["signals"] == evolve_record(run_dir).signals
    assert round_1["explorer"] == "llm" and 0 <= round_1["batch_share"] <= 1
    table = to_markdown(tables)
    assert "### Agent-data rounds" in table and "synthesized share of batches" in table
    before = manifest_times(run_dir)
    execute(build(RunConfig, VALUES), run_dir, quiet=True)
    assert manifest_times(run_dir) == before


def test_the_mixture_puts_the_share_of_synthesized_tasks_in_every_batch():
    base = [Task(f"b{i}", "toy", "train", f"b {i}") for i in range(8)]
    synth = [Task(f"s{i}", "toy", "train", f"s {i}") for i in range(3)]
    assert mixture(base, [], 4, 0.5, 0) is None
    pick = mixture(base, synth, 4, 0.5, 0)
    for step in range(1, 6):
        ids = [t.id for t in pick(step)]
        assert len(ids) == len(set(ids)) == 4
        assert sum(i.startswith("s") for i in ids) == 2
        assert ids == [t.id for t in mixture(base, synth, 4, 0.5, 0)(step)]
    assert sum(t.id.startswith("s") for t in mixture(base, synth[:1], 4, 0.5, 0)(1)) == 1


def test_recipe_mistakes_name_the_setting():
    def check(**section):
        build(RunConfig, {**VALUES, "agent_data": {**AGENT_DATA, **section}}).validate()

    with pytest.raises(ConfigError, match="agent_data.signals"):
        check(signals=["boundary", "lucky"])
    with pytest.raises(ConfigError, match="agent_data.mixture"):
        check(mixture=1.0)
    with pytest.raises(ConfigError, match="agent_data.theta"):
        check(theta=0)
    with pytest.raises(ConfigError, match="agent_data.explorer.server.url is set but server.model"):
        check(explorer={"server": {"url": "http://x/v1"}})
    with pytest.raises(ConfigError, match="explorer.server.reload_command"):
        check(explorer={"server": {"url": "http://x/v1", "model": "m", "reload_command": "x"}})
    with pytest.raises(ConfigError, match="agent_data.explorer.name and agent_data.explorer.path"):
        check(explorer={"name": "smollm2-135m", "path": "/m"})
    with pytest.raises(ConfigError, match="agent_data.explorer.sampling.temperature must be > 0"):
        check(explorer={"sampling": {"temperature": 0.0}})


def test_the_explorer_server_gets_the_server_sections_settings(nano_model_dir):
    """One policy constructor: the explorer's server is built as the run's is, with its
    key, timeout and concurrency."""
    from coevo.policy.server import ServerPolicy
    from coevo.stages.play import open_policy

    server = build(
        RunConfig,
        {"agent_data": {"explorer": {"server": {"url": "http://x/v1", "model": "big"}}}},
    ).agent_data.explorer.server
    server.timeout, server.max_concurrency, server.max_context = 5.0, 3, 512
    made = open_policy(nano_model_dir, name="explorer", server=server)
    assert isinstance(made, ServerPolicy)
    assert (made.model, made.timeout, made.max_concurrency, made.max_context) == (
        "big",
        5.0,
        3,
        512,
    )


@pytest.mark.slow
def test_a_run_killed_mid_round_resumes_and_finishes(run_dir, tmp_path):
    """kill -9 once step 2 trains (after the evolve stage); the rerun redoes nothing finished
    and stores step 2's episodes once."""
    values = {**VALUES, "init_from": str(run_dir)}
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(values))
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    reached = run_until_rows(
        config,
        run,
        "SELECT 1 FROM trajectories WHERE stage='grpo-2'",
        env=env,
        timeout=600,
        # Step 2 played and trained (or its update skipped: no signal), before its log and
        # checkpoint. (The run adopts its SFT stage, so no SFT step logs meanwhile.)
        stop_at=("coevo.train.loop:CheckpointDir.log", "step=2", "before"),
    )
    assert reached, "the run never reached the second interval"
    assert (run / "stages/evolve-1/manifest.json").exists()
    assert not (run / "stages/grpo-2/manifest.json").exists()
    before = manifest_times(run)

    execute(build(RunConfig, values), run, quiet=True)
    after = manifest_times(run)
    assert all(after[name] == t for name, t in before.items())
    assert {"grpo-2", "eval-2"} <= after.keys()
    with Store(run, create=False) as store:
        keys = [(t.task.id, t.sample) for t in store.trajectories(stage="grpo-2")]
        made = store.synthesized()
    assert len(keys) == len(set(keys)) == 16  # step 2 replayed after the kill, stored once
    assert len(made) == evolve_record(run).verified


def test_the_ablations_run_random_exploration_without_verification(run_dir, tmp_path):
    """Signal-free exploration and no verification, from the first run's SFT."""
    section = {**AGENT_DATA, "random_exploration": True, "verify": False, "signals": ["rare"]}
    values = {**VALUES, "init_from": str(run_dir), "agent_data": section}
    run = execute(build(RunConfig, values), tmp_path / "run", quiet=True)
    record = evolve_record(run)
    assert record.explorations == 3 and record.rejected == {}
    assert record.verified == record.candidates == 3  # the toy env makes one task of each
    with Store(run, create=False) as store:
        assert all(r.provenance["signal"] is None for r in store.synthesized())
        assert all(r.provenance["context"] is None for r in store.synthesized())


@pytest.mark.parametrize(
    "override",
    [
        "agent_data.signals=[forgetting]",
        "agent_data.signals=[boundary]",
        "agent_data.signals=[rare]",
        "agent_data.verify=false",
        "agent_data.random_exploration=true",
    ],
)
def test_each_ablation_is_one_override(override):
    from coevo.config import load

    for env in ("shop", "sql", "sciworld"):
        load(RunConfig, ROOT / f"configs/{env}/agent_data.yaml", [override]).validate()


def test_the_report_shows_each_rounds_counts(run_dir, tmp_path):
    from coevo.analysis.report import write_report

    page = write_report([run_dir], tmp_path / "report").read_text()
    record = evolve_record(run_dir)
    assert "Agent-data rounds" in page and 'id="rounds"' in page
    assert f"<td>{record.signals['rare']}</td>" in page


def test_an_evolve_stage_cut_off_resumes_from_what_it_stored(run_dir, tmp_path):
    """The evolve stage's reflections and explorations were stored, then the process died
    before its manifest: the rerun asks the explorer nothing and plays nothing again, and
    records what the unbroken stage did."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    for stage in ("evolve-1", "grpo-2", "eval-2"):
        (run / "stages" / stage / "manifest.json").unlink()
    con = sqlite3.connect(run / "store.sqlite")
    con.execute("DELETE FROM synthesized")
    con.commit()
    con.close()
    with Store(run, create=False) as store:
        explored = [s.id for s in store.stored_trajectories(stage="evolve-1")]
    execute(build(RunConfig, VALUES), run, quiet=True)
    assert evolve_record(run) == evolve_record(run_dir)
    with Store(run, create=False) as store, Store(run_dir, create=False) as unbroken:
        assert [s.id for s in store.stored_trajectories(stage="evolve-1")] == explored
        assert [r.task for r in store.synthesized()] == [r.task for r in unbroken.synthesized()]
