"""The agent-token forward equals log-probs from full logits, in values and in gradients."""

from __future__ import annotations

import random

import pytest
import torch

from coevo.lengths import length_groups
from coevo.train import model as model_module
from coevo.train.batches import (
    DpoExample,
    Tokens,
    collate_dpo,
    collate_forked,
    collate_packed,
    collate_sft,
)
from coevo.train.dpo import pair_logps
from coevo.train.losses import sequence_logps
from coevo.train.model import AgentLogps
from coevo.train.sft import sft_logps
from tests.train.conftest import random_seq, tiny_llama


@pytest.mark.parametrize("chunk", [1024, 7])  # all agent tokens in one chunk of logits, or many
def test_selected_rows_forward_matches_full_logits_with_padding(
    model_factory, sft_data, chunk, monkeypatch
):
    monkeypatch.setattr(model_module, "LOGIT_CHUNK", chunk)
    model = model_factory()
    batch = collate_sft(sft_data[:5])  # lengths differ: right padding inside the batch
    args = (batch["input_ids"], batch["attention_mask"], batch["action_mask"])
    # Unlike enough to go through in several groups, each cut to its own longest row.
    assert len(length_groups(batch["attention_mask"].sum(-1).tolist())) > 1
    net = AgentLogps(model)
    assert net._fast
    fast, tokens = net(*args)
    fast.sum().backward()
    fast_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logits = model(input_ids=args[0], attention_mask=args[1]).logits
    slow = sequence_logps(logits, args[0], args[2])
    slow.sum().backward()
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    assert tokens.tolist() == batch["action_mask"][:, 1:].sum(-1).tolist()
    for p, g in zip(model.parameters(), fast_grads, strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def test_observation_tokens_as_targets_get_no_gradient(model_factory, sft_data):
    # Changing a token that is only ever a masked target (the last one, mask 0) leaves the
    # result bit-for-bit the same: it neither enters the loss nor any scored position's input.
    net = AgentLogps(model_factory())
    seq = sft_data[0]
    ids = torch.tensor([seq.input_ids])
    mask = torch.tensor([seq.action_mask])
    mask[0, -1] = 0
    other = ids.clone()
    other[0, -1] = (other[0, -1] + 1) % 300
    attention = torch.ones_like(ids)
    a, _ = net(ids, attention, mask)
    b, _ = net(other, attention, mask)
    assert torch.equal(a, b)


def test_per_token_forward_of_a_mixed_batch_equals_each_row_alone(model_factory, sft_data):
    net = AgentLogps(model_factory())
    seqs = sft_data[:5]
    batch = collate_sft(seqs)
    logps, entropy = net(
        batch["input_ids"], batch["attention_mask"], batch["action_mask"], per_token=True
    )
    width = batch["input_ids"].shape[1] - 1
    assert logps.shape == entropy.shape == (len(seqs), width)
    for row, seq in enumerate(seqs):
        n = len(seq.input_ids)
        ids, mask = torch.tensor([seq.input_ids]), torch.tensor([seq.action_mask])
        alone, alone_entropy = net(ids, torch.ones_like(ids), mask, per_token=True)
        torch.testing.assert_close(logps[row, : n - 1], alone[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(entropy[row, : n - 1], alone_entropy[0], rtol=1e-5, atol=1e-5)
        assert not logps[row, n - 1 :].any()  # nothing scored on the pads


def forked_pairs() -> list[DpoExample]:
    """Pairs whose sides share prefixes of every kind a fork must handle."""
    rng = random.Random(3)
    base = random_seq(rng, 30, 30)
    ids, mask = list(base.input_ids), list(base.action_mask)
    other = random_seq(rng, 12, 20)
    flipped = mask[:20] + [1 - m for m in mask[20:]]
    return [
        # The usual case: an instruction and a first exchange, then the sides part.
        DpoExample(base, Tokens((*ids[:14], *other.input_ids), (*mask[:14], *other.action_mask))),
        # One side runs on where the other stops; then sides that are the same sequence.
        DpoExample(Tokens(tuple(ids[:18]), tuple(mask[:18])), base),
        DpoExample(base, base),
        # The same ids, agent masks that part at token 20.
        DpoExample(base, Tokens(tuple(ids), tuple(flipped))),
        # Nothing in common from the first token on.
        DpoExample(other, base),
    ]


def test_forked_pairs_give_what_padded_rows_give():
    pairs = forked_pairs()
    model = tiny_llama(kv_heads=2).double()  # grouped-query attention
    model.train()
    rows = collate_dpo(pairs)
    net = AgentLogps(model)
    expected, expected_tokens = pair_logps(net, rows)
    (expected * torch.linspace(1, 2, len(expected), dtype=expected.dtype)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    assert net.can_fork()
    forked = collate_forked(pairs)
    n = len(pairs[4].chosen.input_ids)  # the other sequence
    assert forked["forks"].lengths.tolist() == [
        [14, 16, n],
        [17, 1, 13],
        [29, 1, 1],
        [20, 10, 10],
        [0, n, 30],
    ]
    # Each shared prefix runs once: fewer tokens than both sides, and no pads.
    assert (
        forked["input_ids"].shape[1] == forked["forks"].lengths.sum() < rows["attention_mask"].sum()
    )
    assert int(forked["tokens"]) == int(rows["attention_mask"].sum())
    got, tokens = pair_logps(net, forked)
    (got * torch.linspace(1, 2, len(got), dtype=got.dtype)).sum().backward()
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    assert tokens.tolist() == expected_tokens.tolist()
    # Llama's RMSNorm runs in float32: a prefix token's gradient, summed over both sides
    # before it passes a norm rather than after, rounds differently at that precision.
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)


def test_a_model_that_cannot_fork_says_so():
    net = AgentLogps(tiny_llama(attn="eager"))
    assert not net.can_fork()
    forked = collate_forked(forked_pairs())
    with pytest.raises(ValueError, match="shared_prefix: false"):
        pair_logps(net, forked)


def packed_vs_padded(model: torch.nn.Module, seqs: list) -> tuple:
    """Per-sequence log-probs and token counts, and the gradients of a weighted sum of the
    log-probs, of `seqs` as padded rows and as one packed row."""
    net = AgentLogps(model)
    assert net.can_fork()
    weights = torch.linspace(1, 2, len(seqs))
    got = []
    for batch in (collate_sft(seqs), collate_packed(seqs)):
        model.zero_grad()
        logps, tokens = sft_logps(net, batch)
        (logps * weights).sum().backward()
        got.append((logps.detach(), tokens, [p.grad.clone() for p in model.parameters()]))
    return got


@pytest.mark.parametrize("kv_heads", [4, 2])  # multi-head and grouped-query attention
def test_packed_sequences_give_what_padded_rows_give(sft_data, kv_heads):
    seqs = sft_data[:6]
    packed = collate_packed(seqs)
    lengths = [len(s.input_ids) for s in seqs]
    assert packed["input_ids"].shape == (1, sum(lengths))
    assert packed["lengths"].tolist() == lengths
    assert packed["position_ids"][0].tolist() == [t for n in lengths for t in range(n)]
    (padded, padded_tokens, padded_grads), (got, tokens, grads) = packed_vs_padded(
        tiny_llama(kv_heads=kv_heads), seqs
    )
    assert tokens.tolist() == padded_tokens.tolist()
    torch.testing.assert_close(got, padded, rtol=1e-5, atol=1e-5)
    for g, expected in zip(grads, padded_grads, strict=True):
        torch.testing.assert_close(g, expected, rtol=1e-4, atol=1e-6)


def test_packed_sequences_never_see_each_other(sft_data):
    # Changing every token of the first sequence leaves the others' log-probs bit for bit
    # the same (and the first one's differ): attention stays within each sequence.
    net = AgentLogps(tiny_llama())
    seqs = sft_data[:3]
    other = Tokens(tuple((t + 1) % 300 for t in seqs[0].input_ids), seqs[0].action_mask)
    a, _ = sft_logps(net, collate_packed(seqs))
    b, _ = sft_logps(net, collate_packed([other, *seqs[1:]]))
    assert a[0] != b[0]
    assert torch.equal(a[1:], b[1:])


def test_a_model_that_cannot_pack_says_so(sft_data):
    net = AgentLogps(tiny_llama(attn="eager"))
    with pytest.raises(ValueError, match="sft.packing: false"):
        sft_logps(net, collate_packed(sft_data[:2]))


@pytest.mark.gpu
def test_packed_rows_on_cuda_in_bf16_match_padded_rows(sft_data):
    # On CUDA in half precision the packed row runs one varlen flash call per layer.
    model = tiny_llama(kv_heads=2).cuda()
    seqs = sft_data[:6]
    device = torch.device("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        results = []
        for batch in (collate_sft(seqs), collate_packed(seqs)):
            batch = {k: v.to(device) for k, v in batch.items()}
            model.zero_grad()
            logps, _ = sft_logps(AgentLogps(model), batch)
            logps.sum().backward()
            results.append((logps.detach().float(), [p.grad.float() for p in model.parameters()]))
    (padded, padded_grads), (got, grads) = results
    torch.testing.assert_close(got, padded, rtol=2e-2, atol=5e-2)
    # Two bf16 attention kernels round differently: compare each gradient as a whole.
    for g, expected in zip(grads, padded_grads, strict=True):
        assert (g - expected).norm() <= 2e-2 * expected.norm() + 1e-6
