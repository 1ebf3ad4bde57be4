from __future__ import annotations

import json

import pytest

from coevo.pipeline import Pipeline, RunDirError


def test_finished_stages_are_skipped(tmp_path):
    calls = []

    def stage(out):
        calls.append(out.name)
        (out / "result.txt").write_text("x")
        return {"n": 1}

    p = Pipeline(tmp_path, {"a": 1}, quiet=True)
    assert p.run("sft", stage, {"data": "d"}) == {"n": 1}
    assert p.run("sft", stage) == {"n": 1}
    assert calls == ["sft"]
    manifest = json.loads((tmp_path / "stages/sft/manifest.json").read_text())
    assert manifest["inputs"] == {"data": "d"} and manifest["config_hash"] == p.hash
    # A new Pipeline object on the same directory (a rerun) skips it too.
    assert Pipeline(tmp_path, {"a": 1}, quiet=True).run("sft", stage) == {"n": 1}
    assert calls == ["sft"]


def test_a_stage_that_died_runs_again(tmp_path):
    p = Pipeline(tmp_path, {}, quiet=True)

    def dies(out):
        raise KeyboardInterrupt  # as if killed mid-stage

    with pytest.raises(KeyboardInterrupt):
        p.run("explore", dies)
    assert not p.done("explore")
    assert p.run("explore", lambda out: {"ok": True}) == {"ok": True}
    assert p.done("explore")


def test_other_config_in_same_dir_is_refused(tmp_path):
    Pipeline(tmp_path, {"lr": 1}, quiet=True)
    with pytest.raises(RunDirError, match="another config"):
        Pipeline(tmp_path, {"lr": 2}, quiet=True)
