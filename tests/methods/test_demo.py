from __future__ import annotations

import pytest

from coevo.config import ConfigError
from coevo.methods.demo import demo_configs


def test_demo_recipes_share_the_sft_start(tmp_path):
    runs = demo_configs(tmp_path, [])
    assert [c.method for c, _ in runs] == ["sft", "eto", "failure_agent"]
    assert runs[0][0].init_from is None
    assert all(c.init_from == str(tmp_path / "sft") for c, _ in runs[1:])
    # The demo runs the pretrained model; a recipe check catches a name that does not resolve.
    assert all(c.env.name == "sql" and c.model.name == "smollm2-135m" for c, _ in runs)
    for config, _ in runs:
        config.validate()


def test_demo_overrides_apply_and_are_checked(tmp_path):
    runs = demo_configs(tmp_path, ["iterations=2", "env.eval_tasks=5"])
    assert all(c.iterations == 2 and c.env.eval_tasks == 5 for c, _ in runs)
    with pytest.raises(ConfigError, match="iterationz"):
        demo_configs(tmp_path, ["iterationz=2"])


def test_the_demo_tables_open_with_what_sft_did_to_the_held_out_tasks(tmp_path):
    import json

    from coevo.methods.demo import held_out_effect

    stage = tmp_path / "stages" / "sft-target"
    stage.mkdir(parents=True)
    outputs = {"kind": "sft", "examples": 20, "steps": 9, "held_out_loss": [2.108, 0.175]}
    manifest = {"inputs": {"held_out": 8}, "outputs": outputs}
    (stage / "manifest.json").write_text(json.dumps(manifest))
    text = held_out_effect(tmp_path)
    assert "held-out train tasks" in text and "8" in text
    assert "2.108 before SFT, 0.175 after it" in text
    manifest["outputs"]["held_out_loss"] = None  # a run without a validation slice
    (stage / "manifest.json").write_text(json.dumps(manifest))
    assert held_out_effect(tmp_path) == ""
    assert held_out_effect(tmp_path / "none") == ""
