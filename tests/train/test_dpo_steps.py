"""DPO for a number of optimizer steps (`DpoConfig.steps`) instead of a number of passes."""

from __future__ import annotations

import pytest
import torch

from coevo.train.dpo import DpoConfig
from tests.train.conftest import EXACT
from tests.train.test_dpo import dpo, losses

# The 16 pairs of `dpo_data` in batches of 4, one batch per step: 4 steps per pass. No warm-up,
# so that runs of different lengths share their schedule step for step.
KW = dict(batch_size=4, optim={"lr": 1e-3, "warmup_ratio": 0.0}, device=EXACT)


def test_steps_of_whole_passes_equal_those_passes(tmp_path, model_factory, dpo_data):
    passes = dpo(model_factory(), dpo_data, tmp_path / "a", epochs=2, **KW)
    steps = dpo(model_factory(), dpo_data, tmp_path / "b", epochs=1, steps=8, **KW)
    assert steps.step == passes.step == 8
    assert losses(steps.history) == losses(passes.history)
    for k, v in passes.model.state_dict().items():
        assert torch.equal(v, steps.model.state_dict()[k]), k


def test_more_steps_than_a_pass_cycle_over_the_pairs(tmp_path, model_factory, dpo_data):
    two = dpo(model_factory(), dpo_data, tmp_path / "a", epochs=2, **KW)
    out = dpo(model_factory(), dpo_data, tmp_path / "b", steps=10, **KW)
    assert out.step == 10
    # Two whole passes, then half of a third (shuffled anew), cut at step 10.
    assert [r["epoch"] for r in out.history if "loss" in r] == [0] * 4 + [1] * 4 + [2] * 2
    assert losses(out.history)[:8] == losses(two.history)


def test_fewer_steps_than_a_pass_stop_early(tmp_path, model_factory, dpo_data):
    out = dpo(model_factory(), dpo_data, tmp_path, epochs=3, steps=3, **KW)
    assert out.step == 3 and len(losses(out.history)) == 3


def test_a_run_cut_in_a_later_pass_resumes_exactly(tmp_path, model_factory, dpo_data):
    kw = dict(steps=10, checkpoints={"save_every": 2}, **KW)
    straight = dpo(model_factory(), dpo_data, tmp_path / "a", **kw)
    first = dpo(
        model_factory(),
        dpo_data,
        tmp_path / "b",
        **kw,
        stop_after_steps=6,
    )
    assert first.step == 6
    resumed = dpo(model_factory(), dpo_data, tmp_path / "b", **kw)
    assert resumed.step == 10
    assert losses(resumed.history) == losses(straight.history)


@pytest.mark.parametrize("steps", [0, -2, 2.5])
def test_steps_must_be_a_whole_positive_number(steps):
    with pytest.raises(ValueError, match="DpoConfig.steps must be a whole number"):
        DpoConfig(steps=steps).validate()
