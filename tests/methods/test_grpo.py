"""The grpo method end to end on a nano model and the toy env: stages per evaluation interval,
stored rollouts, compare, and resume after kill -9."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from coevo.analysis.compare import compare
from coevo.config import ConfigError, build
from coevo.methods.grpo import intervals, no_signal_note
from coevo.methods.runner import execute
from coevo.run.recipe import RunConfig
from coevo.run.records import GrpoRecord
from coevo.store import Store
from tests.methods.kill import run_until_rows
from tests.methods.test_run import FAST, manifest_times

GRPO = {
    "steps": 3,
    "eval_every": 2,
    "tasks_per_step": 4,
    "samples": 4,
    "sampling": {"temperature": 1.0, "max_new_tokens": 24},
    "rollout_batch_size": 16,
    "progress": False,
    "optim": {"lr": 1e-3},
}
VALUES = {**FAST, "method": "grpo", "grpo": GRPO}


# Checkpoints kept at each interval's end change no result (a free key): a run of VALUES
# resumes this one, and one of VALUES with init_from takes its first interval from it.
KEEPING = {**VALUES, "grpo": {**GRPO, "checkpoints": {"keep_stage_ends": True}}}


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory) -> Path:
    return execute(build(RunConfig, KEEPING), tmp_path_factory.mktemp("grpo") / "run", quiet=True)


def test_intervals_end_every_eval_every_steps_and_at_the_last():
    assert intervals(3, 2) == [2, 3]
    assert intervals(4, 2) == [2, 4]
    assert intervals(120, 10) == list(range(10, 121, 10))
    assert intervals(5, 10) == [5]


def test_grpo_trains_and_evaluates_one_stage_per_interval(grpo_run):
    stages = set(manifest_times(grpo_run))
    assert {"experts", "model", "sft-target", "eval-0", "grpo-1", "eval-1", "grpo-2"} <= stages
    assert "eval-2" in stages
    first = GrpoRecord.from_dict(
        json.loads((grpo_run / "stages/grpo-1/manifest.json").read_text())["outputs"]
    )
    second = json.loads((grpo_run / "stages/grpo-2/manifest.json").read_text())
    assert (first.first_step, first.steps, len(first.reward)) == (1, 2, 2)
    assert second["outputs"]["first_step"] == 3 and second["outputs"]["steps"] == 3
    assert second["inputs"]["start"] == str(grpo_run / "stages/sft-target/model")
    assert second["inputs"]["trained_with"]["samples"] == 4
    # One trainer folder for the whole run: every step's metrics, the intervals' checkpoints.
    lines = (grpo_run / "stages/grpo/metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
    for i in (1, 2):
        assert (grpo_run / f"stages/grpo-{i}/model/config.json").is_file()
    # More steps extend a finished run from there: the trainer folder keeps its last states.
    assert list((grpo_run / "stages/grpo/checkpoints").glob("step-3"))
    saved = yaml.safe_load((grpo_run / "config.yaml").read_text())
    assert "grpo" in saved and not {"dpo", "explore", "iterations", "eto"} & saved.keys()


def test_the_plan_names_each_interval_with_its_steps(grpo_run, tmp_path):
    from coevo.methods.registry import method
    from coevo.run.estimate import GRPO as STEPS
    from coevo.run.estimate import measured
    from tests.methods.test_run import scope_of

    config = build(RunConfig, VALUES)
    times = manifest_times(grpo_run)
    with scope_of(config, tmp_path / "fresh") as fresh:
        planned = method("grpo").plan(fresh)
    assert [p.name for p in planned] == sorted(times, key=times.get)
    first, second = (p for p in planned if p.name.startswith("grpo-"))
    assert (first.work, first.units, second.units) == (STEPS, 2, 1)
    assert first.what.startswith("2 GRPO steps (steps 1-2 of 3), each 16 episodes (4 tasks x 4 ")
    with scope_of(config, grpo_run) as finished:
        for p in method("grpo").plan(finished):
            did = measured(finished.outputs(p.name) or {})
            assert did == ((p.work, p.units) if p.work else None)


def test_steps_without_signal_are_said_in_words():
    assert no_signal_note([]) is None
    text, warning = no_signal_note([0.25, 0.0])
    assert (text, warning) == (
        "12% of task groups had no signal (every sample of the task scored alike)",
        False,
    )
    assert no_signal_note([0.5, 0.75])[1]  # most groups taught nothing
    text, warning = no_signal_note([1.0, 0.5, 1.0])
    assert warning and text.startswith(
        "2 of 3 steps had no signal in any group, so their updates were skipped; 83% of task "
    )


def test_every_step_stores_its_groups(grpo_run):
    with Store(grpo_run, create=False) as store:
        for stage, steps in (("grpo-1", (1, 2)), ("grpo-2", (3,))):
            for step in steps:
                played = store.trajectories(stage=stage, iteration=step)
                keys = [(t.task.id, t.sample) for t in played]
                assert len(keys) == len(set(keys)) == 16  # 4 tasks x 4 samples
                agent = [turn for t in played for turn in t.turns if turn.role == "assistant"]
                assert all(turn.token_ids and turn.logprobs for turn in agent)


def test_compare_has_a_grpo_row_and_a_rerun_skips_every_stage(grpo_run):
    tables = compare([grpo_run])
    assert "grpo" in tables["rows"]
    column = "tests.toy_env:ToyEnv test_seen"
    assert set(tables["iterations"]["grpo"][column]) == {"0", "1", "2"}  # SFT, 2 intervals
    before = manifest_times(grpo_run)
    execute(build(RunConfig, VALUES), grpo_run, quiet=True)
    assert manifest_times(grpo_run) == before


def test_a_finished_run_grows_by_more_steps_as_if_it_had_asked_for_them(grpo_run, tmp_path):
    """One step, finished; then grpo.steps=3 trains steps 2 and 3 as grpo_run did (same SFT
    start through init_from), keeping the finished interval that ended off the eval grid."""
    short = {**VALUES, "init_from": str(grpo_run), "grpo": {**GRPO, "steps": 1}}
    run = execute(build(RunConfig, short), tmp_path / "run", quiet=True)
    before = manifest_times(run)
    longer = {**short, "grpo": GRPO}
    execute(build(RunConfig, longer), run, quiet=True)
    after = manifest_times(run)
    assert all(after[name] == t for name, t in before.items())  # nothing finished was redone

    def steps(path: Path, interval: int) -> list[int]:
        manifest = path / f"stages/grpo-{interval}/manifest.json"
        return json.loads(manifest.read_text())["inputs"]["steps"]

    assert [steps(run, i) for i in (1, 2, 3)] == [[1, 1], [2, 2], [3, 3]]
    assert "eval-3" in after

    def scores(path: Path, i: int) -> dict:
        manifest = json.loads((path / f"stages/eval-{i}/manifest.json").read_text())
        return manifest["outputs"]["splits"]

    assert rewards(run) == rewards(grpo_run)
    assert scores(run, 3) == scores(grpo_run, 2)  # both after step 3
    assert yaml.safe_load((run / "config.yaml").read_text())["grpo"]["steps"] == 3


def test_steps_extend_a_run_only_where_the_schedule_ignores_their_number():
    from coevo.methods.runner import extending

    assert "grpo.steps" in extending(build(RunConfig, VALUES))
    cosine = {**GRPO, "optim": {"lr": 1e-3, "schedule": "cosine"}}
    assert "grpo.steps" not in extending(build(RunConfig, {**VALUES, "grpo": cosine}))


@pytest.mark.slow
def test_a_run_killed_mid_interval_resumes_to_the_same_result(grpo_run, tmp_path):
    """kill -9 while step 3 (interval 2) trains; the rerun finishes as the unbroken run did.

    The run starts from the finished run's SFT (`init_from`), as compared methods do.
    """
    values = {**VALUES, "init_from": str(grpo_run)}
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(values))
    run = tmp_path / "run"
    reached = run_until_rows(
        config,
        run,
        "SELECT 1 FROM trajectories WHERE stage='grpo-2'",
        timeout=600,
        # Step 3 played and trained (or its update skipped: no signal), before its log and
        # checkpoint. (The run adopts its SFT stage, so no SFT step logs meanwhile.)
        stop_at=("coevo.train.loop:CheckpointDir.log", "step=3", "before"),
    )
    assert reached, "the run never reached the second interval"
    assert not (run / "stages/grpo-2/manifest.json").exists()
    before = manifest_times(run)

    execute(build(RunConfig, values), run, quiet=True)
    after = manifest_times(run)
    assert all(after[name] == t for name, t in before.items())  # nothing finished was redone
    with Store(run, create=False) as store:
        keys = [(t.task.id, t.sample) for t in store.trajectories(stage="grpo-2")]
    assert len(keys) == len(set(keys)) == 16  # step 3 replayed after the kill, stored once

    def final_eval(path: Path) -> dict:
        return json.loads((path / "stages/eval-2/manifest.json").read_text())["outputs"]

    assert rewards(run) == rewards(grpo_run)
    assert final_eval(run) == final_eval(grpo_run)


def test_recipe_mistakes_name_the_setting():
    with pytest.raises(ConfigError, match="samples must be >= 2"):
        build(RunConfig, {**VALUES, "grpo": {**GRPO, "samples": 1}}).validate()
    checkpoints = {"resume": False}
    with pytest.raises(ConfigError, match="grpo.checkpoints.resume' is gone: the stage decides"):
        build(RunConfig, {**VALUES, "grpo": {**GRPO, "checkpoints": checkpoints}}).validate()


def rewards(path: Path) -> list[float]:
    lines = (path / "stages/grpo/metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["reward_mean"] for line in lines]


def test_a_run_takes_the_intervals_another_trained_alike_and_trains_on_as_it_did(
    grpo_run, tmp_path
):
    """Same settings, init_from the finished run: steps 1-2 and their evaluation are adopted
    with the checkpoint kept at step 2, and step 3, trained here, is the finished run's."""
    from coevo.train.loop import is_kept

    kept = grpo_run / "stages/grpo/checkpoints"
    assert sorted(p.name for p in kept.iterdir()) == ["step-2", "step-3"]
    assert is_kept(kept / "step-2") and not is_kept(kept / "step-3")
    run = execute(build(RunConfig, {**VALUES, "init_from": str(grpo_run)}), tmp_path / "run")

    def adopted(name: str) -> str | None:
        return json.loads((run / f"stages/{name}/manifest.json").read_text()).get("adopted_from")

    assert adopted("grpo-1") == adopted("eval-1") == str(grpo_run)
    assert adopted("grpo-2") is None and adopted("eval-2") is None
    assert (run / "stages/grpo/adopted_from").read_text().strip() == str(grpo_run)
    assert rewards(run) == rewards(grpo_run)  # steps 1-2 adopted, step 3 trained alike

    def scores(path: Path) -> dict:
        return json.loads((path / "stages/eval-2/manifest.json").read_text())["outputs"]["splits"]

    assert scores(run) == scores(grpo_run)
    with Store(run, create=False) as ours, Store(grpo_run, create=False) as theirs:
        for step in (1, 2):
            mine = ours.trajectories(stage="grpo-1", iteration=step)
            assert [t.agent_texts for t in mine] == [
                t.agent_texts for t in theirs.trajectories(stage="grpo-1", iteration=step)
            ]


def test_only_intervals_trained_alike_up_to_a_kept_checkpoint_are_adopted(grpo_run, tmp_path):
    import shutil

    from coevo.methods.runner import adoptable, alike_intervals

    def grpo_stages(source: Path = grpo_run, **grpo) -> list[str]:
        config = build(RunConfig, {**VALUES, "grpo": {**GRPO, **grpo}})
        return [s for s in adoptable(source, config)[1] if s[-1].isdigit() and s[:4] != "eval"]

    assert grpo_stages() == ["grpo-1"]
    assert grpo_stages(optim={"lr": 1e-4}) == []  # trained otherwise
    # Without the checkpoint kept at step 2 the run could not train on from there.
    copy = tmp_path / "copy"
    shutil.copytree(grpo_run, copy, copy_function=os.link)
    shutil.rmtree(copy / "stages/grpo/checkpoints/step-2")
    assert grpo_stages(copy) == []
    # agent_data plays as GRPO does up to its first round only.
    later = {"steps": 8, "eval_every": 4}
    assert alike_intervals(build(RunConfig, {**VALUES, "grpo": {**GRPO, **later}})) == [4, 8]
    rounds = {"method": "agent_data", "agent_data": {"synthesis_every": 2}}
    config = build(RunConfig, {**VALUES, **rounds, "grpo": {**GRPO, **later}})
    assert alike_intervals(config) == [2]
