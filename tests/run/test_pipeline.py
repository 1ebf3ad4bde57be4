from __future__ import annotations

import json
import time

import pytest
import yaml

from coevo.run.pipeline import Pipeline, RunDirError


def test_finished_stages_are_skipped(tmp_path):
    calls = []

    def stage(out):
        calls.append(out.name)
        (out / "result.txt").write_text("x")
        return {"n": 1}

    p = Pipeline(tmp_path, {"a": 1}, quiet=True)
    assert p.stage("sft", stage, {"data": "d"}) == {"n": 1}
    assert p.stage("sft", stage) == {"n": 1}
    assert calls == ["sft"]
    manifest = json.loads((tmp_path / "stages/sft/manifest.json").read_text())
    assert manifest["inputs"] == {"data": "d"} and manifest["config_hash"] == p.hash
    # A new Pipeline object on the same directory (a rerun) skips it too.
    assert Pipeline(tmp_path, {"a": 1}, quiet=True).stage("sft", stage) == {"n": 1}
    assert calls == ["sft"]


def test_the_finished_hook_hears_of_stages_that_ran_not_of_those_skipped(tmp_path, capsys):
    heard = []
    p = Pipeline(tmp_path, {}, quiet=True)
    p.finished = heard.append
    p.stage("sft", lambda out: {"n": 1})
    p.stage("sft", lambda out: {"n": 1})  # done before: skipped
    assert heard == ["sft"]
    # A warning shows even on a quiet pipeline: it says that something went wrong.
    p.warn("dpo-1-target", "no pairs")
    assert f"{tmp_path}: stage dpo-1-target: no pairs" in capsys.readouterr().err


def test_a_stage_that_died_runs_again(tmp_path):
    p = Pipeline(tmp_path, {}, quiet=True)

    def dies(out):
        raise KeyboardInterrupt  # as if killed mid-stage

    with pytest.raises(KeyboardInterrupt):
        p.stage("explore", dies)
    assert not p.done("explore")
    assert p.stage("explore", lambda out: {"ok": True}) == {"ok": True}
    assert p.done("explore")


def test_other_config_in_same_dir_is_refused(tmp_path):
    Pipeline(tmp_path, {"lr": 1}, quiet=True)
    with pytest.raises(RunDirError, match="another config"):
        Pipeline(tmp_path, {"lr": 2}, quiet=True)


def test_a_manifest_that_is_not_json_leaves_its_stage_unfinished_with_one_warning(tmp_path, capsys):
    calls = []

    def stage(out):
        calls.append(out.name)
        return {"n": len(calls)}

    p = Pipeline(tmp_path, {}, quiet=True)
    p.stage("sft", stage)
    manifest = tmp_path / "stages/sft/manifest.json"
    manifest.write_text('{"stage": "sft", "outp')  # cut short
    capsys.readouterr()
    rerun = Pipeline(tmp_path, {}, quiet=True)
    assert not rerun.done("sft")
    assert rerun.stage("sft", stage) == {"n": 2}  # ran again, and its manifest is whole again
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"{tmp_path}: stage sft: {manifest} is not valid JSON (")
    assert err[0].endswith("the stage runs again")
    assert json.loads(manifest.read_text())["outputs"] == {"n": 2}
    assert Pipeline(tmp_path, {}, quiet=True).done("sft")


def test_a_stage_whose_rows_left_the_store_runs_again(tmp_path, capsys):
    from coevo.store import Store
    from tests.test_store import make_trajectory

    calls = []

    def explore(out):
        calls.append("explore")
        store.add_trajectories([make_trajectory(i, 0.5) for i in range(3)], stage="explore-1")
        return {"episodes": 3}

    def sft(out):
        calls.append("sft")
        return {"steps": 1}

    def run():
        p = Pipeline(tmp_path, {}, quiet=True)
        p.rows = store.stage_rows
        p.stage("explore-1", explore)
        p.stage("sft", sft)
        return p

    store = Store(tmp_path)
    run()
    run()
    assert calls == ["explore", "sft"]
    store.close()
    # A damaged store moved aside: the stage whose rows it held runs again, the other does not.
    aside = tmp_path / "damaged"
    aside.mkdir()
    for path in tmp_path.glob("store.sqlite*"):
        path.rename(aside / path.name)
    store = Store(tmp_path)
    capsys.readouterr()
    run()
    assert calls == ["explore", "sft", "explore"]
    assert store.stage_rows("explore-1") == 3
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path}: stage explore-1: the store no longer holds its 3 trajectories (was it "
        "moved aside?); the stage runs again"
    ]
    store.close()


def test_stage_lines_name_the_run_and_an_adopted_stage_its_source(tmp_path, capsys):
    p = Pipeline(tmp_path / "eto", {}, name="runs/demo/eto")
    p.stage("sft-target", lambda out: {"n": 1})
    adopted = tmp_path / "eto/stages/eval-0"
    adopted.mkdir(parents=True)
    (adopted / "manifest.json").write_text(
        json.dumps({"outputs": {"n": 2}, "adopted_from": "runs/demo/sft"})
    )
    p.stage("eval-0", lambda out: {"n": 3})
    p.stage("sft-target", lambda out: {"n": 4})
    assert capsys.readouterr().err.splitlines() == [
        "runs/demo/eto: stage sft-target",
        "runs/demo/eto: stage eval-0: adopted from runs/demo/sft",
        "runs/demo/eto: stage sft-target: done before, skipped",
    ]


def saved_pipeline(run_dir, config, **kw):
    """A Pipeline as the runner makes one: the recipe saved beside it as config.yaml."""
    p = Pipeline(run_dir, config, quiet=True, extends=("iterations",), **kw)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return p


def test_a_finished_run_grows_by_its_extending_keys_only(tmp_path):
    first = {"iterations": 1, "sft": {"lr": 0.1, "layers": [1, 2]}}
    saved_pipeline(tmp_path, first).stage("eval-1", lambda out: {"n": 1})
    longer = {**first, "iterations": 3}
    p = saved_pipeline(tmp_path, longer)
    assert p.done("eval-1")  # what was finished stays finished
    stamp = json.loads((tmp_path / "run.json").read_text())
    assert stamp["config_hash"] == p.hash and stamp["extended"] == ["iterations"]
    # Any other change, and shrinking, name the keys that differ.
    changed = {"iterations": 2, "sft": {"lr": 0.2, "layers": [1, 2]}}
    with pytest.raises(RunDirError) as caught:
        saved_pipeline(tmp_path, changed)
    message = str(caught.value)
    assert "iterations (3 -> 2); sft.lr (0.1 -> 0.2)" in message
    assert "only iterations may grow" in message
    assert f"init_from='{tmp_path}'" in message  # how to reuse what it finished


def test_a_refused_recipe_names_another_method_or_env_first_and_every_difference(tmp_path):
    settings = {f"k{i:02d}": i for i in range(12)}  # more than a line's worth, sorted before
    first = {"method": "eto", "env": {"name": "shop"}, "a": settings}
    saved_pipeline(tmp_path, first)
    other = {"method": "sft", "env": {"name": "sql"}, "a": {k: -v - 1 for k, v in settings.items()}}
    with pytest.raises(RunDirError) as caught:
        saved_pipeline(tmp_path, other)
    message = str(caught.value)
    assert 'another recipe: method ("eto" -> "sft"); env.name ("shop" -> "sql"); a.k00' in message
    assert "a.k11 (11 -> -12)" in message and "..." not in message


def test_a_run_resumes_with_memory_and_time_settings_changed(tmp_path):
    first = {"iterations": 1, "dpo": {"compute": {"gradient_checkpointing": False}}}
    saved_pipeline(tmp_path, first).stage("explore-1", lambda out: {"n": 1})
    lighter = {"iterations": 1, "dpo": {"compute": {"gradient_checkpointing": True}}}
    assert saved_pipeline(tmp_path, lighter).done("explore-1")  # memory only: same run
    rows = {**lighter, "dpo": {**lighter["dpo"], "shared_prefix": False}}
    assert saved_pipeline(tmp_path, rows).done("explore-1")  # time only: same run
    threads = {**rows, "model": {"cpu_threads": 2}}
    assert saved_pipeline(tmp_path, threads).done("explore-1")  # time only: same run
    compiled = {**rows, "dpo": {**rows["dpo"], "compute": {"compile": "auto"}}}
    assert saved_pipeline(tmp_path, compiled).done("explore-1")  # time only: same run
    sized = {**rows, "model": {"size": "small"}}
    with pytest.raises(RunDirError, match=r"model.size"):
        saved_pipeline(tmp_path, sized)


def test_a_setting_added_since_the_run_is_no_change_at_its_default(tmp_path):
    old = {"iterations": 1, "sft": {"lr": 0.1}}
    saved_pipeline(tmp_path, old)
    defaults = {"sft": {"lr": 1.0, "tracking": {"log_with": None}}}
    newer = {"iterations": 1, "sft": {"lr": 0.1, "tracking": {"log_with": None}}}
    saved_pipeline(tmp_path, newer, defaults=defaults)
    other = {"iterations": 1, "sft": {"lr": 0.1, "tracking": {"log_with": "tensorboard"}}}
    with pytest.raises(RunDirError, match=r"sft.tracking.log_with \(null -> \"tensorboard\"\)"):
        saved_pipeline(tmp_path, other, defaults=defaults)


def test_a_run_saved_before_keys_moved_resumes_with_them_in_their_new_place(tmp_path):
    old = {"iterations": 1, "explore": {"samples": 1, "temperature": 0.8}, "sft": {"resume": True}}
    saved_pipeline(tmp_path, old).stage("explore-1", lambda out: {"n": 1})

    class Recipe:  # what the root dataclass says of the keys it moved and retired
        MOVED = {"explore.temperature": "explore.sampling.temperature"}
        RETIRED = {"sft.resume": "a trainer's call decides it"}

    now = {"iterations": 1, "explore": {"samples": 1, "sampling": {"temperature": 0.8}}}
    # Without the recipe's word, the moved and retired keys are differences like any other.
    with pytest.raises(RunDirError, match=r"explore.temperature.*sft.resume"):
        Pipeline(tmp_path, now, quiet=True)
    assert Pipeline(tmp_path, now, quiet=True, recipe=Recipe).done("explore-1")
    hotter = {"iterations": 1, "explore": {"samples": 1, "sampling": {"temperature": 0.9}}}
    with pytest.raises(RunDirError, match=r"explore.sampling.temperature \(0.8 -> 0.9\)"):
        Pipeline(tmp_path, hotter, quiet=True, recipe=Recipe)


def test_a_finished_stage_drops_its_scratch_and_keeps_its_outputs(tmp_path):
    def trains(out):
        (out / "checkpoints" / "step-2").mkdir(parents=True, exist_ok=True)
        (out / "checkpoints" / "step-2" / "optimizer.bin").write_text("state")
        (out / "model").mkdir(exist_ok=True)
        (out / "model" / "weights").write_text("w")
        return {"model": str(out / "model")}

    def dies(out):
        trains(out)
        raise KeyboardInterrupt  # cut off: what it would resume from must stay

    p = Pipeline(tmp_path, {}, quiet=True, scratch=("checkpoints",))
    with pytest.raises(KeyboardInterrupt):
        p.stage("dpo", dies)
    assert (tmp_path / "stages/dpo/checkpoints/step-2/optimizer.bin").exists()
    p.stage("dpo", trains)
    assert not (tmp_path / "stages/dpo/checkpoints").exists()
    assert (tmp_path / "stages/dpo/model/weights").read_text() == "w"
    # A stage finished before the rule (its checkpoints still there) loses them when skipped.
    Pipeline(tmp_path, {}, quiet=True).stage("sft", trains)
    assert (tmp_path / "stages/sft/checkpoints").exists()
    p.stage("sft", trains)
    assert not (tmp_path / "stages/sft/checkpoints").exists()
    assert (tmp_path / "stages/sft/model/weights").exists()


def test_a_stage_counts_the_time_of_every_attempt(tmp_path, monkeypatch):
    from coevo.run.pipeline import Attempts

    monkeypatch.setattr(Attempts, "every", 0.02)
    p = Pipeline(tmp_path, {}, quiet=True)
    notes = tmp_path / "stages/sft/attempts.json"
    seen_inside = []

    def cut(out):
        time.sleep(0.2)
        # What a kill here would leave: the heartbeat has noted the attempt still running.
        seen_inside.append(json.loads(notes.read_text()))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        p.stage("sft", cut)
    (inside,) = seen_inside
    assert len(inside) == 1 and inside[0]["seen"] - inside[0]["started"] >= 0.1
    # An attempt killed outright (no chance to note its end), as a file from another process.
    first = json.loads(notes.read_text())
    assert first[0]["seen"] - first[0]["started"] >= 0.2
    notes.write_text(json.dumps(first + [{"started": 1000.0, "seen": 1100.0}]))

    p.stage("sft", lambda out: time.sleep(0.1) or {"ok": True})
    manifest = json.loads((tmp_path / "stages/sft/manifest.json").read_text())
    assert manifest["attempts"] == 3
    assert 100.3 <= manifest["seconds"] < 105
    assert manifest["started"] == first[0]["started"]
    assert not notes.exists()  # the manifest holds the sum


def test_unreadable_attempt_notes_start_the_count_afresh(tmp_path):
    p = Pipeline(tmp_path, {}, quiet=True)
    notes = tmp_path / "stages/sft/attempts.json"
    notes.parent.mkdir(parents=True)
    notes.write_text('[{"started": 1')  # cut short
    p.stage("sft", lambda out: {"ok": True})
    manifest = json.loads((tmp_path / "stages/sft/manifest.json").read_text())
    assert manifest["attempts"] == 1 and 0 <= manifest["seconds"] < 5
