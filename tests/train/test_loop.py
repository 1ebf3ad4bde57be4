"""Checkpoints on time as well as steps, and resume past a checkpoint that lacks a file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from coevo.train.dpo import DpoConfig, train_dpo
from coevo.train.loop import CheckpointDir, CheckpointError
from coevo.train.settings import Checkpoints, Compute, Optim
from coevo.train.sft import SftConfig, train_sft
from tests.train.conftest import EXACT

EVERY_STEP = 1e-9  # minutes: every step is past due


class Killed(Exception):
    """Stands in for a kill -9 right after an optimizer step, before its checkpoint."""


def sft(
    model,
    examples,
    tmp_path: Path,
    *,
    epochs=3,
    warmup_ratio=0.03,
    stop_after_steps=None,
    resume=True,
    **checkpoints,
):
    """SFT into `tmp_path/sft` (lr 3e-3, batch 4, on the CPU: runs are compared exactly) with
    these checkpoint settings, the call stopped or resumed as asked."""
    config = SftConfig(
        epochs=epochs,
        batch_size=4,
        progress=False,
        optim=Optim(lr=3e-3, warmup_ratio=warmup_ratio),
        checkpoints=Checkpoints(**checkpoints),
    )
    out = tmp_path / "sft"
    return train_sft(
        model,
        examples,
        config,
        output_dir=out,
        device=EXACT,
        stop_after_steps=stop_after_steps,
        resume=resume,
    )


def dpo(model, examples, tmp_path: Path, *, epochs, batch_size, **checkpoints):
    """DPO into `tmp_path/dpo` (lr 1e-3) with these checkpoint settings."""
    config = DpoConfig(
        epochs=epochs,
        batch_size=batch_size,
        progress=False,
        optim=replace(DpoConfig().optim, lr=1e-3),
        checkpoints=Checkpoints(**checkpoints),
    )
    return train_dpo(model, examples, config, output_dir=tmp_path / "dpo", device=EXACT)


def steps_on_disk(out: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in (out / "checkpoints").glob("step-*"))


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    other = b.state_dict()
    return all(torch.equal(v, other[k]) for k, v in a.state_dict().items())


def kill_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Make the run die once it has logged optimizer step `step` (its checkpoint not written)."""
    log = CheckpointDir.log

    def dying_log(self: CheckpointDir, record: dict) -> None:
        log(self, record)
        if record.get("step") == step:
            raise Killed

    monkeypatch.setattr(CheckpointDir, "log", dying_log)


def record_resumes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    resumed: list[int] = []
    resume = CheckpointDir.resume

    def recording(self: CheckpointDir) -> int:
        resumed.append(resume(self))
        return resumed[-1]

    monkeypatch.setattr(CheckpointDir, "resume", recording)
    return resumed


@pytest.mark.parametrize(("minutes", "expected"), [(EVERY_STEP, [1, 2, 3, 4, 5, 6]), (0.0, [6])])
def test_checkpoints_come_on_time_without_reaching_save_every(
    tmp_path, model_factory, sft_data, minutes, expected
):
    kw = dict(save_every=200, save_every_minutes=minutes, save_total_limit=10)
    sft(model_factory(), sft_data, tmp_path, epochs=1, **kw)
    assert steps_on_disk(tmp_path / "sft") == expected
    assert not list((tmp_path / "sft" / "checkpoints").glob("*.tmp"))


def test_only_the_newest_time_checkpoints_are_kept(tmp_path, model_factory, sft_data):
    sft(
        model_factory(), sft_data, tmp_path, epochs=1, save_every=200, save_every_minutes=EVERY_STEP
    )
    assert steps_on_disk(tmp_path / "sft") == [5, 6]  # save_total_limit 2


@pytest.mark.parametrize(("minutes", "redone"), [(EVERY_STEP, 1), (0.0, 4)])
def test_a_killed_dpo_stage_redoes_only_the_steps_since_its_last_checkpoint(
    tmp_path, model_factory, dpo_data, monkeypatch, minutes, redone
):
    """A 16-step DPO run with save_every 200, killed after step 4, then run again."""
    kw = dict(epochs=2, batch_size=2, save_every=200, save_every_minutes=minutes)
    straight = dpo(model_factory(), dpo_data, tmp_path / "a", **kw)
    with monkeypatch.context() as patch:
        kill_at(patch, 4)
        with pytest.raises(Killed):
            dpo(model_factory(), dpo_data, tmp_path / "b", **kw)
    resumed_from = record_resumes(monkeypatch)
    again = dpo(model_factory(), dpo_data, tmp_path / "b", **kw)
    assert 4 - resumed_from[0] == redone
    assert again.step == straight.step == 16
    assert same_weights(again.model, straight.model)


def test_a_checkpoint_missing_a_file_falls_back_to_the_one_before(
    tmp_path, model_factory, sft_data, monkeypatch, capsys
):
    kw = dict(epochs=2, save_every=2, warmup_ratio=0.2)
    straight = sft(model_factory(), sft_data, tmp_path / "a", **kw)
    out = tmp_path / "b" / "sft"
    sft(model_factory(), sft_data, tmp_path / "b", stop_after_steps=5, **kw)
    assert steps_on_disk(out) == [4, 5]
    (out / "checkpoints" / "step-5" / "optimizer.bin").unlink()
    capsys.readouterr()
    resumed_from = record_resumes(monkeypatch)
    again = sft(model_factory(seed=99), sft_data, tmp_path / "b", **kw)
    assert resumed_from == [4]
    warning = [line for line in capsys.readouterr().err.splitlines() if "checkpoint" in line]
    assert len(warning) == 1 and "step-5 lacks optimizer.bin; resuming from step 4" in warning[0]
    assert (out / "checkpoints" / "broken-step-5" / "model.safetensors").exists()
    assert same_weights(again.model, straight.model)
    assert [r["loss"] for r in again.history] == [r["loss"] for r in straight.history]


def test_the_only_checkpoint_missing_a_file_falls_back_to_the_start(
    tmp_path, model_factory, sft_data, monkeypatch, capsys
):
    kw = dict(epochs=1, save_every=200)
    straight = sft(model_factory(), sft_data, tmp_path / "a", **kw)
    out = tmp_path / "b" / "sft"
    sft(model_factory(), sft_data, tmp_path / "b", stop_after_steps=3, **kw)
    # A checkpoint written before file lists were recorded: the essentials are checked.
    state = out / "checkpoints" / "step-3" / "trainer_state.json"
    state.write_text(json.dumps({"step": 3, "epoch": 0}))
    (state.parent / "scheduler.bin").unlink()
    capsys.readouterr()
    resumed_from = record_resumes(monkeypatch)
    again = sft(model_factory(), sft_data, tmp_path / "b", **kw)
    assert resumed_from == [0]
    assert (
        "lacks its scheduler.bin; resuming from the start of the stage" in capsys.readouterr().err
    )
    # Nothing of the broken checkpoint was loaded: the run is the straight one.
    assert same_weights(again.model, straight.model)


def test_a_cut_short_file_is_caught_before_loading(tmp_path, model_factory, sft_data, capsys):
    out = tmp_path / "sft"
    kw = dict(epochs=1, save_every=2)
    sft(model_factory(), sft_data, tmp_path, stop_after_steps=4, **kw)
    weights = out / "checkpoints" / "step-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    sft(model_factory(), sft_data, tmp_path, **kw)
    assert "has a cut-short model.safetensors (1000 of" in capsys.readouterr().err


def test_a_checkpoint_that_fails_to_load_part_way_with_none_before_is_a_clear_error(
    tmp_path, model_factory, sft_data
):
    out = tmp_path / "sft"
    kw = dict(epochs=1, save_every=200)
    sft(model_factory(), sft_data, tmp_path, stop_after_steps=2, **kw)
    optimizer = out / "checkpoints" / "step-2" / "optimizer.bin"
    optimizer.write_bytes(b"\0" * optimizer.stat().st_size)  # whole size, unreadable content
    with pytest.raises(CheckpointError, match="delete it to start this stage over"):
        sft(model_factory(), sft_data, tmp_path, **kw)


def test_save_every_minutes_must_not_be_negative(tmp_path, model_factory, sft_data):
    with pytest.raises(ValueError, match="SftConfig.checkpoints.save_every_minutes must be >= 0"):
        sft(model_factory(), sft_data, tmp_path, save_every_minutes=-1)
    with pytest.raises(ValueError, match="DpoConfig.checkpoints.save_every_minutes must be >= 0"):
        DpoConfig(checkpoints=Checkpoints(save_every_minutes=-1.0)).validate()


def test_stages_of_one_process_may_differ_in_device_and_precision(
    tmp_path, model_factory, sft_data
):
    """accelerate keeps one state per process and refuses a second Accelerator with another
    device or precision; a run's stages (and a suite's tests) may ask for both."""
    from accelerate.state import AcceleratorState

    stages = [("bf16", "auto"), ("no", "auto"), ("auto", "cpu")]
    for i, (precision, device) in enumerate(stages):
        config = SftConfig(
            epochs=1,
            batch_size=4,
            progress=False,
            optim=Optim(lr=3e-3),
            compute=Compute(mixed_precision=precision),
        )
        out = tmp_path / str(i)
        result = train_sft(
            model_factory(), sft_data, config, output_dir=out, device=device, stop_after_steps=1
        )
        assert result.step == 1
        assert AcceleratorState().mixed_precision == precision.replace("auto", "no")
    assert AcceleratorState().device.type == "cpu"


def test_a_call_decides_whether_it_resumes_stops_early_and_saves_its_model(
    tmp_path, model_factory, sft_data
):
    """`resume`, `stop_after_steps` and `save_model` are arguments of the call, not settings."""
    kw = dict(epochs=1, save_every=2)
    out = tmp_path / "sft"
    cut = sft(model_factory(), sft_data, tmp_path, stop_after_steps=4, **kw)
    assert cut.step == 4 and not (out / "model").exists()  # stopped: no model to hand on
    assert steps_on_disk(out) == [2, 4]
    again = sft(model_factory(), sft_data, tmp_path, resume=False, stop_after_steps=1, **kw)
    assert again.step == 1 and steps_on_disk(out) == [1]  # started over: the old ones gone
    assert [r["step"] for r in again.history] == [1]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="stop_after_steps must be a whole number >= 1"):
            sft(model_factory(), sft_data, tmp_path / "bad", stop_after_steps=bad, **kw)
    config = SftConfig(epochs=1, batch_size=4, progress=False)
    kept = train_sft(
        model_factory(), sft_data, config, output_dir=tmp_path / "x", device=EXACT, save_model=False
    )
    assert kept.step == 6 and not (tmp_path / "x" / "model").exists()
    assert (tmp_path / "x" / "metrics.jsonl").is_file()


def test_the_last_checkpoint_is_the_weights_alone_and_a_rerun_trains_nothing(
    tmp_path, model_factory, sft_data, monkeypatch
):
    kw = dict(epochs=2, save_every=2)
    first = sft(model_factory(), sft_data, tmp_path, **kw)
    out = tmp_path / "sft" / "checkpoints"
    last, before = out / f"step-{first.step}", out / f"step-{first.step - 2}"
    assert sorted(p.name for p in last.iterdir()) == ["model.safetensors", "trainer_state.json"]
    assert (before / "optimizer.bin").exists()  # a state to train on from, as at any step
    assert json.loads((last / "trainer_state.json").read_text())["weights_only"] is True
    resumed_from = record_resumes(monkeypatch)
    again = sft(model_factory(seed=99), sft_data, tmp_path, **kw)  # other weights to start
    assert resumed_from == [first.step] and again.step == first.step
    assert same_weights(again.model, first.model)
    assert again.history == first.history


def test_a_longer_run_sets_the_weights_alone_aside_and_trains_on_from_a_full_state(
    tmp_path, model_factory, sft_data, monkeypatch, capsys
):
    kw = dict(save_every=2, warmup_ratio=0.0)
    straight = sft(model_factory(), sft_data, tmp_path / "a", epochs=3, **kw)
    short = sft(model_factory(), sft_data, tmp_path / "b", epochs=2, **kw)
    capsys.readouterr()
    resumed_from = record_resumes(monkeypatch)
    longer = sft(model_factory(), sft_data, tmp_path / "b", epochs=3, **kw)
    assert resumed_from == [short.step - 2]  # the full state before the weights-only one
    err = capsys.readouterr().err
    assert f"holds the weights alone of a run that ended at step {short.step}" in err
    assert longer.step == straight.step


@pytest.mark.parametrize("method, compiled", [("sft", False), ("dpo", False), ("dpo", True)])
def test_a_finished_mixed_precision_run_frees_its_model_without_the_cyclic_collector(
    tmp_path, sft_data, dpo_data, monkeypatch, method, compiled
):
    """With mixed precision accelerate binds its forward to the wrapper on the instance (a
    cycle): `loop.release` removes it, so that dropping the result frees the model at once,
    not whenever Python next collects cycles (on a GPU: its weights, beside the next run's).
    Compiled layers (the speed benchmarks' warm-up runs) hold nothing of it either."""
    import gc
    import weakref

    import coevo.train.model as model_module
    from tests.train.conftest import tiny_llama
    from tests.train.test_dpo import dpo
    from tests.train.test_sft import sft

    if compiled:
        torch._dynamo.reset()
        monkeypatch.setattr(model_module, "COMPILE_BACKEND", "aot_eager")  # seconds, no C++
    gc.collect()
    gc.disable()  # only reference counting frees anything below
    try:
        model = tiny_llama()
        alive = weakref.ref(model)
        bf16 = {"mixed_precision": "bf16", "compile": compiled}
        if method == "sft":
            result = sft(model, sft_data[:8], tmp_path, epochs=1, device=EXACT, compute=bf16)
        else:
            result = dpo(model, dpo_data[:8], tmp_path, compute=bf16)
        assert result.model is model and result.history
        del model, result
        assert alive() is None
    finally:
        gc.enable()
