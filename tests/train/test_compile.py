"""`compute.compile`: the decoder layers compiled while training learn what they learn eager.

Compiled here with the `aot_eager` backend (dynamo's graphs run by the eager kernels, no C++
compiler, seconds instead of minutes); what inductor's fused kernels gain is a GPU figure
(`benchmarks/dpo_speed.py --compile`)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import coevo.train.model as model_module
from coevo.train.model import AgentLogps, CompiledLayers
from tests.train.conftest import EXACT, cpu_state, tiny_llama
from tests.train.test_dpo import dpo, losses
from tests.train.test_sft import sft


@pytest.fixture
def compiles(monkeypatch) -> CompileCounterWithBackend:
    """The backend `compute.compile` uses, counting what it compiles."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(model_module, "COMPILE_BACKEND", counter)
    return counter


@pytest.mark.parametrize("checkpointing", [False, True])
def test_dpo_with_compiled_layers_learns_what_it_learns_eager(
    tmp_path, dpo_data, compiles, checkpointing
):
    kw = dict(epochs=2, device=EXACT)
    compute = {"gradient_checkpointing": checkpointing}
    eager = dpo(tiny_llama(), dpo_data, tmp_path / "eager", compute=compute, **kw)
    compiled = dpo(
        tiny_llama(), dpo_data, tmp_path / "compiled", compute={**compute, "compile": True}, **kw
    )
    assert losses(compiled.history) == pytest.approx(losses(eager.history), rel=1e-5)
    for k, v in cpu_state(eager.model).items():
        torch.testing.assert_close(cpu_state(compiled.model)[k], v, rtol=1e-5, atol=1e-6)
    # Compilations shared by the layers: the reference pass (no grad), training (and with
    # checkpointing the first layer, whose input needs no grad), each traced up to twice by
    # dynamo (a restart); new pairs, lengths and models add none.
    compiled_once = compiles.frame_count
    assert 2 <= compiled_once <= 6
    dpo(
        tiny_llama(seed=3),
        dpo_data[::-1][:10],
        tmp_path / "again",
        compute={**compute, "compile": True},
        **kw,
    )
    assert compiles.frame_count == compiled_once
    # The module is left as it was: its layers run their own forward outside training.
    assert all("forward" not in vars(layer) for layer in compiled.model.model.layers)


def test_sft_with_compiled_layers_learns_what_it_learns_eager(tmp_path, sft_data, compiles):
    eager = sft(tiny_llama(), sft_data, tmp_path / "eager", epochs=2, device=EXACT)
    compiled = sft(
        tiny_llama(), sft_data, tmp_path / "c", epochs=2, device=EXACT, compute={"compile": True}
    )
    assert losses(compiled.history) == pytest.approx(losses(eager.history), rel=1e-5)
    # Packed rows of other lengths add no compilation (a batch of fewer sequences would add
    # one: the count of sequences is part of the packed row's layout). How many frames the
    # first run compiles depends on torch (4 on 2.13, 7 on the GPU image's 2.11: restarts and
    # automatic dynamic shapes), never on the batches: fewer than the steps it trained.
    compiled_once = compiles.frame_count
    steps = sum("loss" in r for r in compiled.history)
    assert 1 <= compiled_once < steps
    again = sft_data[::-1]
    sft(tiny_llama(seed=3), again, tmp_path / "again", device=EXACT, compute={"compile": True})
    assert compiles.frame_count == compiled_once


def test_compiled_layers_are_in_place_only_while_log_probs_are_computed(compiles):
    model = tiny_llama()
    net = AgentLogps(model, compile_layers=True)
    ids = torch.randint(0, 100, (2, 12))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        got, _ = net(ids, mask, mask)
        want, _ = AgentLogps(model)(ids, mask, mask)
    torch.testing.assert_close(got, want)
    compiled_once = compiles.frame_count
    assert compiled_once >= 1
    model(ids)  # a plain call, as a policy decoding between steps makes: not compiled
    assert compiles.frame_count == compiled_once
    with pytest.raises(ValueError, match="compute.compile needs a decoder with `layers`"):
        CompiledLayers(_NoLayers())


class _NoLayers(torch.nn.Module):
    def get_decoder(self) -> torch.nn.Module:
        return torch.nn.Linear(2, 2)


def test_auto_compiles_a_long_enough_stage_on_a_gpu_only():
    """`compute.compile=auto`: on CUDA from COMPILE_TOKENS planned tokens on; never on the CPU
    or where the tokens are not known ahead (GRPO); true / false as set."""
    from coevo.train.model import COMPILE_TOKENS, compiling

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    model = tiny_llama()
    assert compiling("auto", model, cuda, COMPILE_TOKENS)
    assert not compiling("auto", model, cuda, COMPILE_TOKENS - 1)
    assert not compiling("auto", model, cpu, 100 * COMPILE_TOKENS)
    assert not compiling("auto", model, cuda, None)
    assert not compiling("auto", _NoLayers(), cuda, COMPILE_TOKENS)  # nothing to compile
    assert compiling(True, model, cpu, 0) and not compiling(False, model, cuda, COMPILE_TOKENS)


def test_a_stage_plans_its_examples_tokens_times_its_epochs_or_its_steps():
    from coevo.train import loop
    from coevo.train.dpo import DpoConfig
    from coevo.train.sft import SftConfig

    lengths = [100, 300]  # mean 200
    assert loop.planned(lengths, SftConfig(epochs=3)) == 1200
    assert loop.planned(lengths, SftConfig(epochs=3), processes=2) == 600  # each its share
    # dpo.steps sets the length: 10 steps of batch_size 4 examples of the mean length
    assert loop.planned(lengths, DpoConfig(steps=10, batch_size=4)) == 8000


def test_auto_on_the_cpu_trains_uncompiled_however_long_the_stage(
    tmp_path, sft_data, compiles, monkeypatch
):
    from coevo.config import ConfigError, build
    from coevo.train.settings import Compute

    assert build(Compute, {"compile": "auto"}).compile == "auto" == Compute().compile
    with pytest.raises(ConfigError, match="compile"):
        build(Compute, {"compile": "yes"})
    monkeypatch.setattr(model_module, "COMPILE_TOKENS", 1)  # every stage is long enough
    sft(tiny_llama(), sft_data[:8], tmp_path, epochs=1, device=EXACT)
    assert compiles.frame_count == 0


def test_where_auto_decides_to_compile_the_stage_compiles_and_says_so(
    tmp_path, sft_data, compiles, monkeypatch, capsys
):
    """The trainer hands `compiling` the setting, its device and the planned tokens, and
    compiles when told to (as on a GPU for a long stage), saying so."""
    from coevo.train import loop

    asked = []
    monkeypatch.setattr(loop, "compiling", lambda *a: asked.append(a) or True)
    examples = sft_data[:8]
    sft(tiny_llama(), examples, tmp_path, epochs=2, device=EXACT)
    planned = 2 * sum(len(e.input_ids) for e in examples)
    assert [(s, d.type, n) for s, _, d, n in asked] == [("auto", "cpu", planned)]
    assert compiles.frame_count >= 1
    assert f"compute.compile=auto: decoder layers compiled ({planned:,} tokens planned per" in (
        capsys.readouterr().out
    )
