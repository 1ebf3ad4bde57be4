"""Methods are named in one place, and a run's saved recipe holds what its method reads."""

from __future__ import annotations

import pytest

from coevo.config import ConfigError, build, load
from coevo.methods.recipe import RunConfig
from coevo.methods.registry import METHODS, OPTIONAL, method
from coevo.methods.runner import recorded


def test_an_unknown_method_names_the_known_ones():
    with pytest.raises(ConfigError, match="method must be one of 'sft', 'rft', 'eto', "):
        method("ppo")
    assert all(callable(m.loop) for m in METHODS.values())
    # grpo and agent_data sample with GRPO's own settings
    samplers = [m for m in METHODS if m not in ("sft", "grpo", "agent_data")]
    assert not method("sft").explores and all(method(m).explores for m in samplers)


@pytest.mark.parametrize(
    ("name", "kept", "left_out"),
    [
        (
            "sft",
            set(),
            {
                "iterations",
                "dpo",
                "explore",
                "analysis",
                "rft",
                "eto",
                "failure_agent",
                "grpo",
                "agent_data",
            },
        ),
        (
            "rft",
            {"rft", "explore", "analysis"},
            {"iterations", "dpo", "eto", "failure_agent", "grpo", "agent_data"},
        ),
        (
            "eto",
            {"iterations", "dpo", "explore", "eto"},
            {"rft", "failure_agent", "grpo", "agent_data"},
        ),
        ("failure_agent", {"dpo", "eto", "failure_agent"}, {"rft", "grpo", "agent_data"}),
        ("frozen_failure", {"eto", "failure_agent"}, {"rft", "grpo", "agent_data"}),
        (
            "grpo",
            {"grpo"},
            {
                "iterations",
                "dpo",
                "explore",
                "analysis",
                "rft",
                "eto",
                "failure_agent",
                "agent_data",
            },
        ),
        (
            "agent_data",
            {"grpo", "agent_data"},
            {"iterations", "dpo", "explore", "analysis", "rft", "eto", "failure_agent"},
        ),
    ],
)
def test_the_saved_recipe_keeps_the_sections_its_method_reads(name, kept, left_out):
    saved = recorded(build(RunConfig, {"method": name}))
    assert kept <= saved.keys() and not left_out & saved.keys()
    assert {"method", "seed", "env", "model", "sft", "eval"} <= saved.keys()
    assert "server" not in saved  # played in-process
    assert set(OPTIONAL) - saved.keys() == left_out
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
