"""Methods are named in one place, and a run's saved recipe holds what its method reads."""

from __future__ import annotations

import pytest

from coevo.config import ConfigError, build, load
from coevo.methods.registry import METHODS, OPTIONAL, method
from coevo.methods.runner import recorded
from coevo.run.recipe import RunConfig


def test_an_unknown_method_names_the_known_ones():
    with pytest.raises(ConfigError, match="method must be one of 'base', 'sft', 'rft', 'eto', "):
        method("ppo")
    assert all(callable(m.loop) for m in METHODS.values())
    # grpo and agent_data sample with GRPO's own settings
    samplers = [m for m in METHODS if m not in ("base", "sft", "grpo", "agent_data")]
    assert not method("sft").explores and all(method(m).explores for m in samplers)
    assert not method("base").explores


PREFERENCE = {"iterations", "dpo", "explore", "analysis", "eto", "failure_agent"}


@pytest.mark.parametrize(
    ("name", "reads"),
    [
        ("base", set()),
        ("sft", set()),
        ("rft", {"rft", "explore", "analysis"}),
        ("eto", PREFERENCE - {"failure_agent"}),
        ("failure_agent", PREFERENCE),
        ("frozen_failure", PREFERENCE),
        ("grpo", {"grpo"}),
        ("agent_data", {"grpo", "agent_data"}),
    ],
)
def test_the_saved_recipe_keeps_the_sections_its_method_reads(name, reads):
    saved = recorded(build(RunConfig, {"method": name}))
    # The optional sections it keeps are exactly those it reads; every other is left out.
    assert set(OPTIONAL) & saved.keys() == reads
    assert {"method", "seed", "env", "model", "sft", "eval"} <= saved.keys()
    assert "server" not in saved  # played in-process
    # No setting the stages overrule: trainers' seeds and folders are per stage.
    assert not {"seed", "output_dir"} & saved["sft"].keys()


def test_a_saved_recipe_loads_back_into_the_same_run(tmp_path):
    import yaml

    config = build(
        RunConfig,
        {
            "method": "failure_agent",
            "model": {"backend": "server"},
            "server": {"url": "http://localhost:8000/v1", "model": "m"},
            "sft": {"lora": {"r": 8}},
            "dpo": {"lora": {"r": 8}},
            "eto": {"later_lr": 1e-6},
        },
    )
    saved = recorded(config)
    assert saved["server"]["url"] == "http://localhost:8000/v1"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(saved, sort_keys=False))
    assert recorded(load(RunConfig, path)) == saved
