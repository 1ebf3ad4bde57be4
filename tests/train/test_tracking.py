"""Trackers: off by default; `tracking.log_with: tensorboard` logs what metrics.jsonl holds
(SFT, DPO and GRPO)."""

from __future__ import annotations

import pytest

from coevo.config import ConfigError, build
from coevo.run.recipe import RunConfig
from coevo.train.dpo import DpoConfig, train_dpo
from coevo.train.settings import Tracking
from coevo.train.sft import SftConfig, train_sft


def scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """Tag -> (step, value) of every scalar TensorBoard event files under `log_dir` hold."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # The run's own file; the settings (hparams) go to a file in a folder below.
    (events,) = list(log_dir.glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events.parent))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_gets_every_logged_number(tmp_path, model_factory, sft_data, dpo_data):
    pytest.importorskip("tensorboard")
    tracking = Tracking(log_with="tensorboard", project="demo")
    config = SftConfig(batch_size=8, epochs=1, progress=False, tracking=tracking)
    result = train_sft(model_factory(), sft_data, config, output_dir=tmp_path / "sft")
    logged = scalars(tmp_path / "sft" / "demo")
    losses = [(r["step"], r["loss"]) for r in result.history]
    assert [s for s, _ in logged["loss"]] == [s for s, _ in losses] == [1, 2, 3]
    assert [v for _, v in logged["loss"]] == pytest.approx([v for _, v in losses], rel=1e-6)
    dpo = DpoConfig(batch_size=4, epochs=1, progress=False, tracking=tracking)
    result = train_dpo(model_factory(), dpo_data, dpo, output_dir=tmp_path / "dpo")
    logged = scalars(tmp_path / "dpo" / "demo")
    assert {"dpo_loss", "reward_margin", "reward_accuracy"} <= logged.keys()
    assert len(logged["reward_margin"]) == result.step


def test_grpo_logs_to_tensorboard_too(tmp_path, nano_model_dir):
    pytest.importorskip("tensorboard")
    from tests.train.test_grpo import config, grpo

    tracking = {"log_with": "tensorboard", "project": "demo"}
    result = grpo(nano_model_dir, tmp_path / "grpo", config(steps=2, tracking=tracking))
    logged = scalars(tmp_path / "grpo" / "demo")
    rewards = [(r["step"], r["reward_mean"]) for r in result.history]
    assert [s for s, _ in logged["reward_mean"]] == [s for s, _ in rewards] == [1, 2]
    assert [v for _, v in logged["reward_mean"]] == pytest.approx([v for _, v in rewards])


def test_no_tracker_by_default(tmp_path, model_factory, sft_data):
    config = SftConfig(batch_size=8, epochs=1, progress=False)
    train_sft(model_factory(), sft_data, config, output_dir=tmp_path / "sft")
    assert not list(tmp_path.rglob("events.out.tfevents.*"))
    assert sorted(p.name for p in (tmp_path / "sft").iterdir()) == [
        "checkpoints",
        "metrics.jsonl",
        "model",
    ]


def test_a_tracker_that_cannot_log_is_one_sentence_before_training(monkeypatch):
    with pytest.raises(ConfigError, match="sft.tracking.log_with: unknown tracker 'tensorbord'"):
        build(RunConfig, {"sft": {"tracking": {"log_with": "tensorbord"}}})
    import accelerate.tracking

    monkeypatch.setattr(accelerate.tracking, "get_available_trackers", lambda: [])
    with pytest.raises(ValueError, match="wandb is not installed here"):
        Tracking(log_with="wandb").check("DpoConfig.tracking")
