from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from coevo.config import ConfigError, build, load, parse_overrides, save
from coevo.run.recipe import RunConfig


@dataclass
class Train:
    lr: float = 1e-5
    """Learning rate."""
    epochs: int = 3
    target_modules: list[str] = field(default_factory=lambda: ["q_proj"])


@dataclass
class Recipe:
    method: Literal["sft", "eto"] = "sft"
    iterations: int = 1
    seed: int | None = None
    train: Train = field(default_factory=Train)

    def validate(self) -> None:
        if self.iterations < 0:
            raise ConfigError("iterations must be >= 0.")


def test_defaults_yaml_and_overrides_layer(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("method: eto\ntrain:\n  lr: 1e-6\n")
    child = tmp_path / "child.yaml"
    child.write_text("base: base.yaml\niterations: 4\n")
    cfg = load(Recipe, child, ["train.epochs=2", "seed=7", "train.target_modules=[a, b]"])
    assert cfg.method == "eto" and cfg.iterations == 4 and cfg.seed == 7
    assert cfg.train.lr == pytest.approx(1e-6) and cfg.train.epochs == 2
    assert cfg.train.target_modules == ["a", "b"]
    out = tmp_path / "resolved.yaml"
    save(cfg, out)
    assert load(Recipe, out) == cfg


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.lrr=1"], "Unknown config key 'train.lrr'. Did you mean 'train.lr'"),
        (["iteratons=2"], "Did you mean 'iterations'"),
        (["method=ppo"], "method must be one of 'sft', 'eto', not 'ppo'"),
        (["iterations=two"], "iterations must be an integer, not 'two'"),
        (["train.lr=fast"], "train.lr must be a number"),
        (["train=3"], "train must be a mapping"),
        (["iterations=-1"], "iterations must be >= 0"),
        (["novalue"], "not of the form key=value"),
    ],
)
def test_wrong_keys_and_values_name_themselves(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load(Recipe, None, overrides)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"sft": {"batch_size": 0}}, "sft.batch_size must be >= 1, got 0."),
        ({"dpo": {"beta": -1}}, "dpo.beta must be > 0, got -1.0."),
        ({"grpo": {"optim": {"warmup_ratio": 2}}}, "grpo.optim.warmup_ratio must be in [0, 1)"),
        ({"sft": {"checkpoints": {"save_every": 0}}}, "sft.checkpoints.save_every must be >= 1"),
        ({"model": {"cut_block": -1}}, "model.cut_block must be >= 0, got -1."),
    ],
)
def test_a_trainer_sections_own_check_names_the_recipe_key(section, message):
    # The trainer configs name themselves (SftConfig.batch_size) when built in Python; in a
    # recipe the user wrote sft.batch_size, and that is the key the error names.
    with pytest.raises(ConfigError) as caught:
        build(RunConfig, section)
    assert str(caught.value).startswith(message)


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load(Recipe, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping at the top"):
        load(Recipe, bad)


def test_the_override_error_gives_an_example_that_works():
    import re

    from coevo.run.recipe import RunConfig

    with pytest.raises(ConfigError) as caught:
        parse_overrides(["lr"])
    example = re.search(r"e\.g\. (\S+)\)", str(caught.value)).group(1)
    assert load(RunConfig, None, [example]).sft.optim.lr == 1e-6  # a real key of a recipe
