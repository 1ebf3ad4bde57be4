"""Loss values worked out by hand, exact zero gradients on masked tokens, and TRL agreement."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from coevo.train.losses import (
    dpo_loss,
    group_advantages,
    grpo_loss,
    head_logps,
    sequence_logps,
    token_logps,
)

LN3 = math.log(3.0)


def test_sequence_logps_by_hand_with_the_shift():
    # vocab 2, one sequence of 4 tokens; logits row t predicts token t + 1.
    labels = torch.tensor([[1, 0, 1, 1]])
    mask = torch.tensor([[0, 1, 1, 0]])  # tokens 1 and 2 are the agent's
    logits = torch.tensor(
        [
            [
                [0.0, LN3],  # row 0 -> token 1 (= 0): p = 1 / (1 + 3) = 1/4
                [0.0, 0.0],  # row 1 -> token 2 (= 1): p = 1/2
                [0.0, -math.inf],  # row 2 -> token 3 (= 1): p = 0, but masked out
                [5.0, -5.0],  # row 3 predicts nothing
            ]
        ],
        requires_grad=True,
    )
    got = sequence_logps(logits, labels, mask)
    # log(1/4) + log(1/2) = -3 ln 2 = -2.0794415
    assert got.item() == pytest.approx(-3 * math.log(2.0), abs=1e-6)

    (-got.sum()).backward()
    grad = logits.grad[0]
    # d(-log p)/d logits = softmax - onehot: row 0: [1/4 - 1, 3/4] = [-0.75, 0.75]
    assert grad[0].tolist() == pytest.approx([-0.75, 0.75])
    assert grad[1].tolist() == pytest.approx([0.5, -0.5])
    # Masked and unused rows get exactly zero gradient, even next to a -inf.
    assert torch.equal(grad[2], torch.zeros(2))
    assert torch.equal(grad[3], torch.zeros(2))


def test_masked_tokens_get_exactly_zero_gradient_on_random_logits():
    torch.manual_seed(0)
    logits = torch.randn(3, 9, 11, requires_grad=True)
    labels = torch.randint(0, 11, (3, 9))
    mask = (torch.rand(3, 9) < 0.5).long()
    sequence_logps(logits, labels, mask).sum().backward()
    unscored = torch.ones(3, 9, dtype=torch.bool)
    unscored[:, :-1] = mask[:, 1:] == 0  # row t is used only when token t + 1 is scored
    assert torch.equal(logits.grad[unscored], torch.zeros_like(logits.grad[unscored]))
    assert (logits.grad[~unscored].abs().sum(-1) > 0).all()


def test_sequence_logps_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="sequence_logps needs"):
        sequence_logps(torch.zeros(2, 5, 3), torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4))


def head_case(rows: int = 48, vocab: int = 300, width: int = 64):
    torch.manual_seed(0)
    hidden = torch.randn(rows, width, requires_grad=True)
    weight = (0.3 * torch.randn(vocab, width)).requires_grad_()
    labels = torch.randint(0, vocab, (rows,))
    scale = torch.linspace(-1, 2, rows)  # unequal gradients per row, as DPO's sides get
    return hidden, weight, labels, scale


def plain_head(hidden, weight, labels, scale):
    """The unchunked reference: a (rows, vocab) logits tensor, autograd's backward."""
    logps = token_logps(torch.nn.functional.linear(hidden, weight), labels)
    (logps * scale).sum().backward()
    return logps.detach(), hidden.grad.clone(), weight.grad.clone()


def chunked_head(hidden, weight, labels, scale, chunk, entropy=False):
    hidden.grad = weight.grad = None
    logps, ent = head_logps(hidden, weight, labels, chunk=chunk, entropy=entropy)
    (logps * scale).sum().backward()
    return logps.detach(), hidden.grad.clone(), weight.grad.clone(), ent


def test_head_logps_in_one_chunk_is_the_plain_forward_and_backward_bit_for_bit():
    hidden, weight, labels, scale = head_case()
    expected = plain_head(hidden, weight, labels, scale)
    got = chunked_head(hidden, weight, labels, scale, chunk=48)[:3]
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


def test_head_logps_in_chunks_equals_the_plain_forward_and_backward():
    hidden, weight, labels, scale = head_case()
    logps, grad_hidden, grad_weight = plain_head(hidden, weight, labels, scale)
    # 48 rows in chunks of 16: each chunk's matrix product gives its rows the bits the whole
    # product gives them (so the log-probs and the hidden states' gradients are equal); the
    # head's gradient is a sum over rows, here added up chunk by chunk: rounding only.
    got_logps, got_hidden, got_weight, _ = chunked_head(hidden, weight, labels, scale, chunk=16)
    assert torch.equal(got_logps, logps)
    assert torch.equal(got_hidden, grad_hidden)
    torch.testing.assert_close(got_weight, grad_weight, rtol=1e-6, atol=1e-6)
    # Any chunk size, a ragged last chunk included, within float32 rounding.
    for chunk in (1, 5, 47):
        got = chunked_head(hidden, weight, labels, scale, chunk=chunk)
        for a, b in zip(got[:3], (logps, grad_hidden, grad_weight), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_head_logps_entropy_and_a_frozen_head():
    hidden, weight, labels, scale = head_case(rows=10, vocab=7, width=4)
    logps, _, _, ent = chunked_head(hidden, weight, labels, scale, chunk=3, entropy=True)
    probs = torch.softmax(torch.nn.functional.linear(hidden, weight).detach(), dim=-1)
    torch.testing.assert_close(ent, -(probs * probs.log()).sum(-1))
    assert not ent.requires_grad
    weight.requires_grad_(False)  # LoRA or a frozen embedding: no head gradient is computed
    hidden.grad = weight.grad = None
    head_logps(hidden, weight, labels, chunk=3)[0].sum().backward()
    assert hidden.grad is not None and weight.grad is None


def test_head_logps_under_autocast_computes_the_head_in_its_dtype():
    hidden, weight, labels, scale = head_case()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = plain_head(hidden, weight, labels, scale)
        got = chunked_head(hidden, weight, labels, scale, chunk=48)[:3]
    assert got[0].dtype == torch.float32 and got[2].dtype == torch.float32
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


def test_head_logps_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="head_logps needs"):
        head_logps(torch.zeros(4, 8), torch.zeros(10, 7), torch.zeros(4, dtype=torch.long))


def test_weighted_dpo_and_sft_by_hand():
    beta = 0.1
    out = dpo_loss(
        torch.tensor([-10.0, -5.0]),  # policy chosen
        torch.tensor([-14.0, -3.0]),  # policy rejected
        torch.tensor([-12.0, -5.0]),  # reference chosen
        torch.tensor([-12.0, -5.0]),  # reference rejected
        beta=beta,
        weights=torch.tensor([0.5, 1.0]),
        sft_weights=torch.tensor([0.1, 0.0]),
        chosen_tokens=torch.tensor([5, 2]),
    )
    # Pair 1: chosen ratio -10 - -12 = 2, rejected ratio -14 - -12 = -2, margin 4:
    #   dpo = -log sigmoid(0.1 * 4) = log(1 + e^-0.4) = log(1.6703200) = 0.5130153
    #   nll = 10 / 5 tokens = 2.0;  loss = 0.5 * (0.5130153 + 0.1 * 2.0) = 0.3565077
    # Pair 2: ratios 0 and 2, margin -2:
    #   dpo = log(1 + e^0.2) = log(2.2214028) = 0.7981389;  sft weight 0 -> loss = 0.7981389
    # Batch: plain mean over the 2 pairs = (0.3565077 + 0.7981389) / 2 = 0.5773233
    assert out.dpo.tolist() == pytest.approx([0.5130153, 0.7981389], abs=1e-6)
    assert out.per_pair.tolist() == pytest.approx([0.3565077, 0.7981389], abs=1e-6)
    assert out.loss.item() == pytest.approx(0.5773233, abs=1e-6)
    m = {k: v.item() for k, v in out.metrics().items()}
    # rewards: chosen 0.1 * [2, 0], rejected 0.1 * [-2, 2]; margins [0.4, -0.2]
    assert m["reward_chosen"] == pytest.approx(0.1)
    assert m["reward_rejected"] == pytest.approx(0.0)
    assert m["reward_margin"] == pytest.approx(0.1)
    assert m["reward_accuracy"] == pytest.approx(0.5)
    assert m["logps_chosen"] == pytest.approx(-7.5)
    assert m["logps_rejected"] == pytest.approx(-8.5)


def test_lambda_dpo_scales_only_the_dpo_term():
    args = [torch.tensor([-4.0]), torch.tensor([-6.0]), torch.tensor([-5.0]), torch.tensor([-5.0])]
    out = dpo_loss(
        *args,
        beta=0.5,
        lambda_dpo=2.0,
        sft_weights=torch.tensor([1.0]),
        chosen_tokens=torch.tensor([4]),
    )
    # margin (1) - (-1) = 2; dpo = log(1 + e^-1) = 0.3132617; nll = 4 / 4 = 1
    # loss = 2.0 * 0.3132617 + 1.0 * 1 = 1.6265233
    assert out.loss.item() == pytest.approx(1.6265233, abs=1e-6)


def test_dpo_needs_token_counts_for_the_sft_term():
    x = torch.tensor([-1.0])
    with pytest.raises(ValueError, match="chosen_tokens"):
        dpo_loss(x, x, x, x, beta=0.1, sft_weights=torch.tensor([0.1]))


def _trl_loss(per_token: torch.Tensor, ref_c, ref_r, beta, loss_types, loss_weights):
    """Run TRL 1.16's own DPOTrainer._compute_loss on given per-token log-probs.

    The trainer's loss lives in a method, not a free function: it is called here on a
    stand-in `self` and a stand-in model that returns the per-token log-probs we choose.
    """
    from trl.trainer.dpo_trainer import DPOTrainer

    rows, length = per_token.shape
    fake_accelerator = SimpleNamespace(
        device=torch.device("cpu"), gather_for_metrics=lambda x: x, gather=lambda x: x
    )
    trainer = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=fake_accelerator,
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=loss_types,
        loss_weights=loss_weights,
        beta=beta,
        use_weighting=False,
        label_smoothing=0.0,
        _metrics={"train": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )

    def model(**kwargs):
        zeros = torch.zeros(rows, length)
        return SimpleNamespace(
            log_probs=per_token, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool()
        )

    # One prompt token, then `length` completion tokens: the shifted mask covers them all.
    completion = torch.ones(rows, length + 1, dtype=torch.long)
    completion[:, 0] = 0
    inputs = {
        "input_ids": torch.zeros(rows, length + 1, dtype=torch.long),
        "attention_mask": torch.ones(rows, length + 1, dtype=torch.long),
        "completion_mask": completion,
        "ref_chosen_logps": ref_c,
        "ref_rejected_logps": ref_r,
    }
    loss = DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in trainer._metrics["train"].items()}


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_equals_trl_sigmoid_loss(beta):
    torch.manual_seed(1)
    pairs, length = 6, 7
    per_token = -torch.rand(2 * pairs, length) * 3  # rows: chosen then rejected, as TRL
    ref_c, ref_r = -torch.rand(pairs) * 20, -torch.rand(pairs) * 20
    trl_loss, trl_metrics = _trl_loss(per_token, ref_c, ref_r, beta, ["sigmoid"], [1.0])
    chosen, rejected = per_token.sum(1).chunk(2)
    ours = dpo_loss(chosen, rejected, ref_c, ref_r, beta=beta)
    assert ours.loss.item() == pytest.approx(trl_loss.item(), rel=1e-6)
    m = ours.metrics()
    assert m["reward_accuracy"].item() == pytest.approx(trl_metrics["rewards/accuracies"])
    assert m["reward_margin"].item() == pytest.approx(trl_metrics["rewards/margins"], rel=1e-5)
    assert m["reward_chosen"].item() == pytest.approx(trl_metrics["rewards/chosen"], rel=1e-5)
    assert m["logps_rejected"].item() == pytest.approx(trl_metrics["logps/rejected"], rel=1e-6)


def test_dpo_plus_sft_equals_trl_sigmoid_plus_sft_on_equal_lengths():
    # TRL's "sft" term is the chosen NLL per token over the whole batch; ours is per pair.
    # With equal lengths and one SFT weight for all pairs the two are the same number.
    torch.manual_seed(2)
    pairs, length = 4, 5
    per_token = -torch.rand(2 * pairs, length) * 3
    ref_c, ref_r = -torch.rand(pairs) * 10, -torch.rand(pairs) * 10
    trl_loss, _ = _trl_loss(per_token, ref_c, ref_r, 0.2, ["sigmoid", "sft"], [1.0, 0.1])
    chosen, rejected = per_token.sum(1).chunk(2)
    ours = dpo_loss(
        chosen,
        rejected,
        ref_c,
        ref_r,
        beta=0.2,
        sft_weights=torch.full((pairs,), 0.1),
        chosen_tokens=torch.full((pairs,), length),
    )
    assert ours.loss.item() == pytest.approx(trl_loss.item(), rel=1e-6)


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2])
    groups = torch.tensor([7, 7, 3, 3, 9])
    # group 7: mean 0.5, std 0.5 -> +1, -1; group 3 all equal -> 0; a lone sample -> 0
    scaled = group_advantages(rewards, groups)
    assert scaled.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0], abs=1e-5)
    raw = group_advantages(rewards, groups, scale=False)
    assert raw.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="one shape"):
        group_advantages(rewards, groups[:2])


def test_grpo_on_policy_is_the_advantage_weighted_token_mean():
    logps = torch.tensor([[-1.0, -2.0, 100.0], [-0.5, 100.0, 100.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = grpo_loss(logps, logps.detach(), torch.tensor([2.0, -1.0]), mask)
    # ratio 1 everywhere: per token -A; token mean over 3 agent tokens: (-2 - 2 + 1) / 3
    assert out.loss.item() == pytest.approx(-1.0)
    out.loss.backward()
    expected = torch.tensor([[-2 / 3, -2 / 3, 0.0], [1 / 3, 0.0, 0.0]])
    assert torch.allclose(logps.grad, expected)  # off-mask tokens: exactly 0, even at 100
    assert out.sums()["clip_fraction"].item() == 0.0


@pytest.mark.parametrize(
    ("delta", "adv", "clipped", "value"),
    [
        (0.5, 1.0, True, -1.28),  # ratio 1.65 above 1 + 0.28, good action: capped, no gradient
        (0.5, -1.0, False, math.exp(0.5)),  # bad action made likelier: the full ratio counts
        (-0.5, 1.0, False, -math.exp(-0.5)),  # good action made rarer: the full ratio counts
        (-0.5, -1.0, True, 0.8),  # ratio 0.61 below 1 - 0.2, bad action: capped, no gradient
    ],
)
def test_grpo_clips_asymmetrically(delta, adv, clipped, value):
    old = torch.tensor([[-1.0]])
    logps = (old + delta).clone().requires_grad_(True)
    out = grpo_loss(logps, old, torch.tensor([adv]), torch.ones(1, 1))
    assert out.loss.item() == pytest.approx(value, rel=1e-5)
    assert bool(out.clipped[0, 0]) is clipped
    out.loss.backward()
    assert (logps.grad.abs().item() == 0.0) is clipped


def test_grpo_kl_term_is_k3_times_beta():
    logps = torch.tensor([[math.log(0.25), math.log(0.5)]])
    ref = torch.tensor([[math.log(0.5), math.log(0.5)]])  # ref - logp = ln 2, then 0
    mask = torch.ones(1, 2)
    k3 = 2 - math.log(2) - 1
    plain = grpo_loss(logps, logps, torch.tensor([0.0]), mask, ref_logps=ref)
    assert plain.loss.item() == pytest.approx(0.0)  # beta 0: KL watched, not trained
    assert plain.sums()["kl"].item() == pytest.approx(k3)  # over the 2 tokens: mean k3 / 2
    with_kl = grpo_loss(logps, logps, torch.tensor([0.0]), mask, ref_logps=ref, beta=0.1)
    assert with_kl.loss.item() == pytest.approx(0.1 * k3 / 2)
    with pytest.raises(ValueError, match="needs ref_logps"):
        grpo_loss(logps, logps, torch.tensor([0.0]), mask, beta=0.1)
