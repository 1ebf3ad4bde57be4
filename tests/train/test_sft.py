"""The SFT loop: parameters move, accumulation equals a big batch, resume is exact, LoRA."""

from __future__ import annotations

import json

import pytest
import torch

from coevo.config import build, merge
from coevo.train.loop import TrainResult
from coevo.train.sft import SftConfig, train_sft
from tests.train.conftest import EXACT, cpu_state


def config(**kw) -> SftConfig:
    """The test settings (lr 3e-3, batch 4) overlaid by `kw`; groups as mappings."""
    return build(SftConfig, merge({"batch_size": 4, "progress": False, "optim": {"lr": 3e-3}}, kw))


def sft(
    model, examples, tmp_path, *, eval_examples=(), device="auto", stop_after_steps=None, **kw
) -> TrainResult:
    """`train_sft` into `tmp_path/sft` with `config(**kw)`."""
    return train_sft(
        model,
        examples,
        config(**kw),
        output_dir=tmp_path / "sft",
        eval_examples=eval_examples,
        device=device,
        stop_after_steps=stop_after_steps,
    )


def test_a_few_steps_change_every_parameter_and_lower_the_loss(tmp_path, model_factory, sft_data):
    model = model_factory()
    before = cpu_state(model)
    result = sft(model, sft_data, tmp_path, epochs=4, eval_examples=sft_data[:6])
    after = cpu_state(result.model)
    unchanged = [k for k, v in before.items() if torch.equal(v, after[k])]
    assert unchanged == []
    evals = [(r["step"], r["eval_loss"]) for r in result.history if "eval_loss" in r]
    assert [step for step, _ in evals] == [0, 6, 12, 18, 24]  # before training, each epoch
    assert evals[-1][1] < evals[0][1] - 0.1
    steps = [r for r in result.history if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 25))  # 24 sequences / 4 = 6 steps x 4
    # Written to disk as well: the history, and a loadable model.
    lines = (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == result.history
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "sft" / "model")
    assert torch.equal(loaded.state_dict()["lm_head.weight"], after["lm_head.weight"])


def test_gradient_accumulation_equals_one_big_batch(tmp_path, model_factory, sft_data):
    data = sft_data[:4]
    kw = dict(epochs=1, optim={"lr": 1e-2, "warmup_ratio": 0.0}, device=EXACT)
    one = sft(model_factory(), data, tmp_path / "a", batch_size=4, **kw)
    two = sft(model_factory(), data, tmp_path / "b", batch_size=2, grad_accum=2, **kw)
    # Same 4 sequences in one optimizer step: loss per token over the whole window.
    assert one.history[0]["loss"] == pytest.approx(two.history[0]["loss"], rel=1e-6)
    # Adam's first step is about lr * sign(grad): a float-rounding difference in a near-zero
    # gradient can move one weight by a little; 1e-5 is 0.1% of the step (lr 1e-2).
    for k, v in one.model.state_dict().items():
        torch.testing.assert_close(v, two.model.state_dict()[k], rtol=0, atol=1e-5)


def test_stopped_and_resumed_run_gives_the_same_losses(tmp_path, model_factory, sft_data):
    kw = dict(epochs=2, checkpoints={"save_every": 2}, optim={"warmup_ratio": 0.2}, device=EXACT)
    straight = sft(model_factory(), sft_data, tmp_path / "a", **kw)

    # Mid-epoch, after a checkpoint at 4.
    cut = {**kw, "stop_after_steps": 5}
    first = sft(model_factory(), sft_data, tmp_path / "b", **cut)
    assert first.step == 5 and not (tmp_path / "b" / "sft" / "model").exists()
    # The new process starts from a different random model: the checkpoint must overwrite it.
    resumed = sft(model_factory(seed=99), sft_data, tmp_path / "b", **kw)
    assert resumed.step == 12
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in straight.history]
    assert [r["lr"] for r in resumed.history] == [r["lr"] for r in straight.history]
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


def test_lora_changes_only_the_adapters_and_saves_merged(tmp_path, model_factory, sft_data):
    model = model_factory()
    before = cpu_state(model)
    kw = dict(epochs=1, lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    part = sft(model, sft_data, tmp_path, stop_after_steps=3, **kw)
    trainable = {n for n, p in part.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    state = cpu_state(part.model)
    for name, value in state.items():
        if "lora_" in name:
            continue
        original = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(value, before[original]), name
    lora_b = [v for n, v in state.items() if "lora_B" in n]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b)  # B starts at zero

    done = sft(model_factory(), sft_data, tmp_path, **kw)
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "sft" / "model").state_dict()
    assert set(merged) == set(before)  # a plain model: adapters merged away
    changed = {k for k in before if not torch.equal(before[k], merged[k])}
    assert changed and all(("q_proj" in k or "v_proj" in k) for k in changed)
    assert done.step == 6


def test_train_layers_moves_only_the_top_layers(tmp_path, model_factory, sft_data):
    model = model_factory()
    layers = len(model.get_decoder().layers)
    before = cpu_state(model)
    result = sft(model, sft_data, tmp_path, epochs=1, compute={"train_layers": 1})
    changed = {k for k, v in cpu_state(result.model).items() if not torch.equal(v, before[k])}
    top = f"layers.{layers - 1}."
    # Every weight of the top layer and the final norm moved; nothing else did (the
    # embeddings, tied to the head, included).
    assert changed == {k for k in before if top in k or k == "model.norm.weight"}

    lora = sft(
        model_factory(),
        sft_data,
        tmp_path / "lora",
        compute={"train_layers": 1},
        lora={"r": 4, "alpha": 8},
        stop_after_steps=2,
    )
    adapted = {n for n, p in lora.model.named_parameters() if p.requires_grad}
    assert adapted and all(top in n and "lora_" in n for n in adapted)


def test_bad_settings_and_data_get_clear_errors(tmp_path, model_factory, sft_data):
    with pytest.raises(ValueError, match="SftConfig.batch_size"):
        train_sft(model_factory(), sft_data, SftConfig(batch_size=0), output_dir=tmp_path)
    with pytest.raises(ValueError, match="no examples"):
        sft(model_factory(), [], tmp_path)
    with pytest.raises(FileNotFoundError, match="coevo model init"):
        sft(str(tmp_path / "nowhere"), sft_data, tmp_path)


def test_packing_trains_like_padded_batches(tmp_path, model_factory, sft_data):
    kw = dict(epochs=2, device=EXACT, compute={"gradient_checkpointing": True})
    padded = sft(model_factory(), sft_data, tmp_path / "padded", packing=False, **kw)
    packed = sft(model_factory(), sft_data, tmp_path / "packed", packing=True, **kw)
    losses = [r["loss"] for r in packed.history if "loss" in r]
    assert losses == pytest.approx([r["loss"] for r in padded.history if "loss" in r], rel=1e-5)
    # The same sums in another order (a sequence alone or in a padded batch) round apart by
    # about 1e-6 here over 12 Adam steps of lr 3e-3.
    after = packed.model.state_dict()
    for name, value in padded.model.state_dict().items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=1e-5)
    # A model that cannot keep packed sequences apart trains on padded rows instead.
    eager = [
        sft(model_factory(attn="eager"), sft_data[:8], tmp_path / f"eager-{packing}",
            packing=packing, epochs=1, device=EXACT)
        for packing in (True, False)
    ]  # fmt: skip
    assert [r["loss"] for r in eager[0].history] == [r["loss"] for r in eager[1].history]


def test_activation_checkpointing_changes_memory_not_the_result(tmp_path, model_factory, sft_data):
    """Why a run may resume with it turned on or off (coevo.run.pipeline.FREE_KEYS): the weights
    trained with recomputed activations are the weights trained without."""
    plain = sft(model_factory(), sft_data, tmp_path / "plain", epochs=1, device=EXACT)
    checkpointed = sft(
        model_factory(),
        sft_data,
        tmp_path / "checkpointed",
        epochs=1,
        compute={"gradient_checkpointing": True},
        device=EXACT,
    )
    after = checkpointed.model.state_dict()
    for name, value in plain.model.state_dict().items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=0)
