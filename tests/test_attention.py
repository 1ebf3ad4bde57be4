"""Packed grouped-query attention: the same numbers as transformers' SDPA, without the copy."""

from __future__ import annotations

import shutil

import torch

from coevo.attention import NAME, use_packed_attention
from coevo.policy.cache import cache_keyword


def gqa_llama(heads: int = 8, kv_heads: int = 2, seed: int = 0, attn: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=96,
        attn_implementation=attn,
    )
    return LlamaForCausalLM(config).double().eval()


def prefill_then_more(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded rows: 9 tokens, then 3 more over the cache (a rollout's next step)."""
    torch.manual_seed(1)
    ids = torch.randint(0, 100, (3, 12))
    attention = torch.ones(3, 12, dtype=torch.long)
    attention[0, :4] = 0
    attention[1, :2] = 0
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        first = model(
            input_ids=ids[:, :9],
            attention_mask=attention[:, :9],
            position_ids=positions[:, :9],
            use_cache=True,
        )
        more = model(
            input_ids=ids[:, 9:],
            attention_mask=attention,
            position_ids=positions[:, 9:],
            **{cache_keyword(model): first.past_key_values},
            use_cache=True,
        )
    return first.logits, more.logits


def test_packed_queries_give_what_copied_keys_give(monkeypatch):
    model = gqa_llama()
    expected = prefill_then_more(model)
    assert use_packed_attention(model)
    assert model.config._attn_implementation == NAME

    shapes = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, **kwargs):
        shapes.append((query.shape[1], key.shape[1]))
        return sdpa(query, key, value, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    got = prefill_then_more(model)
    # Every call ran on the 2 key/value heads as they are (4 query heads x tokens per row).
    assert shapes and all(s == (2, 2) for s in shapes)
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_models_it_cannot_serve_are_left_alone():
    eager = gqa_llama(attn="eager")
    assert not use_packed_attention(eager)
    assert eager.config._attn_implementation == "eager"
    # Without grouped queries (or without a mask) it is transformers' SDPA itself.
    plain = gqa_llama(heads=4, kv_heads=4)
    expected = prefill_then_more(plain)
    assert use_packed_attention(plain)
    for a, b in zip(expected, prefill_then_more(plain), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_policy_plays_grouped_query_models_packed(nano_model_dir, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    from coevo.policy.hf import HFPolicy

    shutil.copytree(nano_model_dir, tmp_path / "m")
    config = AutoConfig.from_pretrained(tmp_path / "m")
    config.num_key_value_heads = config.num_attention_heads // 2
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "m")
    policy = HFPolicy(tmp_path / "m", dtype="float64")
    assert policy.model.config._attn_implementation == NAME
    saved = tmp_path / "saved"
    policy.model.save_pretrained(saved)  # the switch is not written into the checkpoint
    assert NAME not in (saved / "config.json").read_text()


def test_the_packed_path_trains_like_sdpa():
    """Exact in backward too: a policy's model may be its trainer's."""
    model = gqa_llama()
    ids = torch.randint(0, 100, (2, 10))
    attention = torch.ones(2, 10, dtype=torch.long)
    attention[0, :3] = 0

    def grads():
        model.zero_grad()
        loss = model(input_ids=ids, attention_mask=attention, labels=ids).loss
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    expected = grads()
    use_packed_attention(model)
    for a, b in zip(expected, grads(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_attention_backends_are_torch_s_own_choice_off_cuda():
    from contextlib import nullcontext

    from coevo.attention import sdpa_backends

    assert isinstance(sdpa_backends(torch.device("cpu")), nullcontext)


def per_sequence(q, k, v, lengths, scale, causal=True):
    """What a varlen kernel computes, one causal SDPA call per sequence ((tokens, heads, dim))."""
    import torch.nn.functional as F

    out, start = [], 0
    for n in lengths:
        rows = slice(start, start + n)
        qs, ks, vs = (x[rows].transpose(0, 1) for x in (q, k, v))
        gqa = qs.shape[0] != ks.shape[0]
        o = F.scaled_dot_product_attention(
            qs, ks, vs, is_causal=causal, scale=scale, enable_gqa=gqa
        )
        out.append(o.transpose(0, 1))
        start += n
    return torch.cat(out)


def test_varlen_attention_is_asked_as_each_torch_spells_it():
    """Newer torches' `varlen_attn` takes `enable_gqa` and `window_size`, older ones neither
    (and say `is_causal`), the first (torch 2.9) no `scale` either: each gets the call it
    takes, with the same result."""
    from coevo.attention import causal_varlen

    torch.manual_seed(0)
    lengths = [5, 3, 7]
    bounds = torch.tensor([0, 5, 8, 15], dtype=torch.int32)
    q, k, v = torch.randn(15, 6, 8), torch.randn(15, 2, 8), torch.randn(15, 2, 8)
    seen = []

    def newest(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
               enable_gqa=False):  # fmt: skip
        seen.append(("newest", k.shape[1], window_size, enable_gqa))
        return per_sequence(q, k, v, lengths, scale, causal=window_size == (-1, 0))

    def without_gqa(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
        assert q.shape[1] == k.shape[1], "this torch refuses grouped heads"
        seen.append(("without_gqa", k.shape[1], window_size))
        return per_sequence(q, k, v, lengths, scale, causal=window_size == (-1, 0))

    def oldest(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, *, scale=None):
        assert q.shape[1] == k.shape[1]
        seen.append(("oldest", k.shape[1], is_causal))
        return per_sequence(q, k, v, lengths, scale, causal=is_causal)

    def first(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None):
        assert q.shape[1] == k.shape[1]
        seen.append(("first", k.shape[1], is_causal))
        return per_sequence(q, k, v, lengths, None, causal=is_causal)  # 1 / sqrt(head_dim)

    expected = per_sequence(q, k, v, lengths, 0.3)
    for fn in (newest, without_gqa, oldest, first):
        got = causal_varlen(fn, q, k, v, bounds, 7, 0.3)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    unscaled = per_sequence(q, k, v, lengths, None)
    torch.testing.assert_close(causal_varlen(first, q, k, v, bounds, 7, None), unscaled)
    assert seen == [
        ("newest", 2, (-1, 0), True),
        ("without_gqa", 6, (-1, 0)),
        ("oldest", 6, True),
        ("first", 6, True),
        ("first", 6, True),
    ]


def test_packed_rows_run_per_sequence_on_a_torch_without_varlen(monkeypatch):
    """A torch without `torch.nn.attention.varlen` (before 2.9) never reaches for it."""
    from coevo import attention

    query = torch.zeros(1, 2, 3, 8)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(attention, "_flash_gpu", lambda index: True)
    assert attention._varlen_kernel(query) is attention.HAS_VARLEN
    monkeypatch.setattr(attention, "HAS_VARLEN", False)
    assert attention._varlen_kernel(query) is False


def test_the_gpu_and_torch_questions_are_constants_to_the_compiler(monkeypatch):
    """Compiled layers reach `_flash_gpu` and `_varlen_spelling` in every packed attention
    call: each is asked once and inlined as a constant (no trace of it, no graph break)."""
    from coevo import attention

    asked = []
    monkeypatch.setattr(attention._flash_gpu, "answers", {})
    monkeypatch.setattr(attention._varlen_spelling, "answers", {})

    def capability(device=None):
        if device is not None:  # torch's own question (dynamo asks, on a GPU) is not coevo's
            asked.append(device)
        return (9, 0)

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)

    def spelled(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
        return q

    @torch.compile(fullgraph=True, backend="eager")
    def step(x):
        gqa, window, scaled = attention._varlen_spelling(spelled)
        return x + attention._flash_gpu(0) + 2 * gqa + 4 * window + 8 * scaled

    # Ampere or newer, no gqa, a window, a scale
    assert step(torch.zeros(2)).tolist() == [13.0, 13.0]
    assert step(torch.ones(2)).tolist() == [14.0, 14.0]
    assert asked == [0]
