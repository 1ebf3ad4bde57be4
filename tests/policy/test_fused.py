"""Fused projections in the fixed-shape step (`coevo.policy.fused`): the eager loop's replies,
with fewer matrix products a layer, over weights that change between calls."""

from __future__ import annotations

import pytest
import torch

from coevo.policy.base import Sampling
from coevo.policy.fused import FusedProjections
from coevo.policy.hf import HFPolicy
from coevo.policy.static_decode import StaticDecoder
from tests.policy.test_static_decode import assert_same, both, varied_prompts


def linears_traced(model_dir, fuse: bool) -> tuple[int, StaticDecoder]:
    """A policy decoding `model_dir`'s model with a compiled step (its replies checked
    against the eager loop's); returns the `linear` calls in the one graph compiled and the
    decoder."""
    graphs = []

    def keep(gm, inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    eager, static = both(model_dir)
    compile = lambda fn: torch.compile(fn, backend=keep, fullgraph=True)  # noqa: E731
    static.decoder = StaticDecoder(static.model, compile=compile, fuse=fuse)
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=8, logprobs=True, stop=())
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert len(graphs) == 1 and static.decoder.fallback is None
    linear = torch._C._nn.linear
    calls = sum(n.op == "call_function" and n.target is linear for n in graphs[0].graph.nodes)
    return calls, static.decoder


def test_a_fused_step_runs_four_products_a_layer_where_it_ran_seven(gqa_model_dir):
    layers = 4  # the nano's
    plain, _ = linears_traced(gqa_model_dir, fuse=False)
    fused, decoder = linears_traced(gqa_model_dir, fuse=True)
    assert len(decoder.fused) == 2 * layers
    assert plain == 7 * layers + 1  # and the head's
    assert fused == 4 * layers + 1


@pytest.mark.parametrize("compiled", [False, True])
def test_fused_replies_equal_the_eager_loops_as_the_weights_change(gqa_model_dir, compiled):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    eager, static = both(gqa_model_dir)
    counter = CompileCounterWithBackend("aot_eager")
    compile = (lambda fn: torch.compile(fn, backend=counter, fullgraph=True)) if compiled else None
    static.decoder = StaticDecoder(static.model, compile=compile, fuse=True)
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=12, logprobs=True, stop=())
    sampled = Sampling(temperature=0.9, max_new_tokens=12, logprobs=True, stop=())
    seeds = [1, 2, 3, 4, 5]

    keys = ["a", "b", "c", "d", "e"]

    def same() -> None:
        assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
        assert_same(
            static.generate(prompts, sampled, seeds=seeds),
            eager.generate(prompts, sampled, seeds=seeds),
        )
        # Two turns over sessions: the second prefills only its new tokens.
        replies = static.generate(prompts, sampled, seeds=seeds, sessions=keys)
        later = [p + list(r.token_ids) + p[-3:] for p, r in zip(prompts, replies, strict=True)]
        assert_same(
            static.generate(later, sampled, seeds=seeds, sessions=keys),
            eager.generate(later, sampled, seeds=seeds),
        )
        static.end_sessions(keys)

    same()
    with torch.no_grad():
        for p in static.model.parameters():
            p.mul_(1.5)  # an optimizer's in-place update
    same()
    for module in static.model.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = module.weight.data * 0.5  # new tensors, behind autograd's back
    same()
    assert counter.frame_count == (1 if compiled else 0)
    assert static.decoder.fallback is None
    # Outside a step every projection is its own again: the prefill, training.
    assert all("forward" not in vars(m) for g in static.decoder.fused.groups for m in g)


def test_only_plain_linears_of_one_input_are_fused():
    class Attention(torch.nn.Module):
        def __init__(self, kv_in: int = 8, bias: bool = False) -> None:
            super().__init__()
            self.q_proj = torch.nn.Linear(8, 8, bias=bias)
            self.k_proj = torch.nn.Linear(kv_in, 4, bias=bias)
            self.v_proj = torch.nn.Linear(kv_in, 4, bias=bias)

    class Wrapped(torch.nn.Linear):  # as a LoRA layer would be: not a plain linear
        pass

    odd = Attention()
    odd.v_proj = Wrapped(8, 4)
    model = torch.nn.ModuleList([Attention(), Attention(bias=True), Attention(kv_in=6), odd])
    fused = FusedProjections(model)
    assert [g[0] for g in fused.groups] == [model[0].q_proj, model[1].q_proj]
    fused.refresh()
    x = torch.randn(3, 8)
    with fused.active():
        got = [linear(x) for linear in fused.groups[1]]
    want = [linear(x) for linear in fused.groups[1]]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_a_fused_and_a_plain_decoder_over_one_module_keep_their_compilations(gqa_model_dir):
    """The probe's two ways (`benchmarks/fused_decode.py`), calls alternating: each decoder
    compiles its step once and neither falls back."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compile = lambda fn: torch.compile(fn, backend=counter, fullgraph=True)  # noqa: E731
    eager, plain = both(gqa_model_dir)
    fused = HFPolicy(gqa_model_dir, model=plain.model, dtype="float64", decode="static")
    plain.decoder = StaticDecoder(plain.model, compile=compile)
    fused.decoder = StaticDecoder(plain.model, compile=compile, fuse=True)
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=8, logprobs=True, stop=())
    want = eager.generate(prompts, greedy)
    for _ in range(2):
        for policy in (plain, fused):
            assert_same(policy.generate(prompts, greedy), want)
            assert policy.decoder.fallback is None
    assert counter.frame_count == 2
