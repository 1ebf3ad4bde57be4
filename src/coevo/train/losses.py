"""Pure tensor losses of the trainers: sequence log-probs, agent-token NLL, weighted DPO + SFT,
GRPO's group advantages and clipped surrogate.

No models, no files: tensors in, tensors out, so every number here can be checked by hand.

How a batch is normalised (the same rule in SFT, DPO and the loops' gradient accumulation):

- SFT (Eq. 5): the NLL is summed over agent tokens and divided by the number of agent tokens in
  the whole optimizer step (all micro-batches, all processes). Per token, not per sequence,
  because trajectories differ in length by 10x and a per-sequence sum would make the learning
  rate depend on episode length; this is also what ETO's SFT (labels = -100 elsewhere) does.
- DPO (Eq. 7 and 9): each pair i contributes
      loss_i = w_i * (lambda_dpo * dpo_i + s_i * nll_i)
  with w_i the pair's `weight`, s_i its `sft_weight` and nll_i the chosen trajectory's NLL per
  agent token. The step's loss is sum_i loss_i / (number of pairs), a plain mean over pairs, not
  over weights: dividing by sum(w) would scale a batch of half-weight pairs back up and undo the
  paper's "expert pairs of one instruction share a total weight of 1.0".
  w_i scales the SFT term too, so an expert trajectory that is the chosen side of two pairs
  of weight 0.5 is imitated once per instruction, not twice. nll_i is per token because
  lambda_SFT = 0.1 is set against a DPO term of order log 2: a summed NLL over hundreds of
  tokens would swamp it (TRL's "sft" loss type is per token for the same reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F


def token_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label under its row of logits, in float32.

    logits: (..., vocab); labels: (...) -> (...)
    """
    logits = logits.float()
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    # logsumexp instead of log_softmax: it never materialises a second (..., vocab) tensor.
    return picked - torch.logsumexp(logits, dim=-1)


def head_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    chunk: int = 1024,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logps(F.linear(hidden, weight), labels)`, `chunk` rows of logits at a time.

    hidden: (rows, hidden) the states that predict the labels; weight: (vocab, hidden) a
    bias-free LM head; labels: (rows,) -> logps (rows,) float32, and with `entropy` the entropy
    of each row's distribution (rows,), detached; else None.
    The (rows, vocab) float32 logits of a plain forward are kept for its backward: 200 KB a row
    at a 49k vocabulary, more than the rest of a small model's activations. Here at most one
    chunk of them lives at a time: the backward recomputes the logits of every chunk but the
    last. The same numbers as the plain forward, in the same precision (under autocast the
    head runs in its dtype, as `F.linear` would): each row's value is computed by the same
    operations, bit for bit where the matrix product gives a row the same bits whatever the
    other rows are.
    """
    if (
        hidden.dim() != 2
        or labels.shape != hidden.shape[:1]
        or weight.shape[1:] != hidden.shape[1:]
    ):
        raise ValueError(
            f"head_logps needs hidden (rows, hidden), weight (vocab, hidden) and labels (rows,), "
            f"got {tuple(hidden.shape)}, {tuple(weight.shape)} and {tuple(labels.shape)}."
        )
    if chunk < 1:
        raise ValueError(f"head_logps needs chunk >= 1, got {chunk}.")
    logps, ent = _HeadLogps.apply(hidden, weight, labels, chunk, entropy)
    return logps, ent if entropy else None


def _head_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype `F.linear(hidden, weight)` computes in here: autocast's, else the inputs'."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return torch.promote_types(hidden.dtype, weight.dtype)


class _HeadLogps(torch.autograd.Function):
    """`head_logps`' forward and backward; its backward is autograd's for the plain ops
    (`F.linear`, `.float()`, gather minus logsumexp), written out per chunk."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk, entropy):  # type: ignore[override]
        dtype = _head_dtype(hidden, weight)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(dtype)
            parts, lses, ents = [], [], []
            logits = hidden.new_empty(0, weight.shape[0], dtype=torch.float32)
            for h, y in zip(hidden.split(chunk), labels.split(chunk), strict=True):
                logits = F.linear(h.to(dtype), w).float()  # (chunk, vocab)
                lse = torch.logsumexp(logits, dim=-1)  # (chunk,)
                parts.append(logits.gather(-1, y.unsqueeze(-1)).squeeze(-1) - lse)
                lses.append(lse)
                if entropy:
                    logp = torch.log_softmax(logits, dim=-1)
                    ents.append(-(logp.exp() * logp).sum(-1))
        ctx.save_for_backward(hidden, weight, labels, torch.cat(lses) if lses else logits[:, 0])
        ctx.chunk, ctx.dtype = chunk, dtype
        ctx.last = logits  # the last chunk's logits: the backward need not recompute them
        logps = torch.cat(parts) if parts else logits[:, 0]
        ent = torch.cat(ents) if ents else torch.zeros_like(logps)
        ctx.mark_non_differentiable(ent)
        return logps, ent

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logps, _grad_entropy):  # type: ignore[override]
        hidden, weight, labels, lse = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros_like(weight) if need_weight else None
        starts = range(0, hidden.shape[0], ctx.chunk)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(ctx.dtype)
            for start in starts:
                rows = slice(start, start + ctx.chunk)
                h = hidden[rows].to(ctx.dtype)
                last = start == starts[-1]
                logits = ctx.last if last else F.linear(h, w).float()  # (chunk, vocab)
                g = grad_logps[rows]  # (chunk,)
                # d(picked - lse)/d logits = onehot(label) - softmax, in place over the logits.
                grad = logits.sub_(lse[rows].unsqueeze(-1)).exp_().mul_(-g.unsqueeze(-1))
                grad.scatter_add_(-1, labels[rows].unsqueeze(-1), g.unsqueeze(-1))
                grad = grad.to(ctx.dtype)
                if need_hidden:
                    grad_hidden[rows] = grad @ w
                if need_weight:
                    grad_weight += (grad.T @ h).to(weight.dtype)
        ctx.last = None
        return grad_hidden, grad_weight, None, None, None


def sequence_logps(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence log-prob summed over the tokens where `mask` is 1.

    logits: (batch, seq, vocab) from the model on `labels`; labels: (batch, seq) the input ids;
    mask: (batch, seq), 1 on the tokens to score (the agent's). -> (batch,)
    The logits at position t predict token t + 1, so the first token is never scored and the
    last logits row predicts nothing.
    """
    if logits.shape[:2] != labels.shape or labels.shape != mask.shape:
        raise ValueError(
            f"sequence_logps needs logits (batch, seq, vocab) and labels/mask (batch, seq), got "
            f"{tuple(logits.shape)}, {tuple(labels.shape)} and {tuple(mask.shape)}."
        )
    target_mask = mask[:, 1:].to(torch.bool)  # (batch, seq - 1)
    # Masked positions are replaced, not just multiplied by 0, so that a -inf there cannot
    # turn into NaN (0 * -inf) and their gradient is exactly zero.
    per_token = token_logps(logits[:, :-1], labels[:, 1:])  # (batch, seq - 1)
    return torch.where(target_mask, per_token, 0.0).sum(-1)


@dataclass(frozen=True)
class DpoLoss:
    """The weighted DPO + SFT objective of a batch of pairs, with the numbers users watch."""

    loss: torch.Tensor
    """() mean of `per_pair` over the batch: what to backpropagate."""
    per_pair: torch.Tensor
    """(pairs,) w_i * (lambda_dpo * dpo_i + s_i * nll_i)."""
    dpo: torch.Tensor
    """(pairs,) unweighted sigmoid DPO loss -log sigmoid(beta * margin)."""
    nll: torch.Tensor
    """(pairs,) chosen NLL per agent token (0 where `dpo_loss` got no token counts)."""
    chosen_rewards: torch.Tensor
    """(pairs,) beta * (log pi(chosen) - log ref(chosen)), detached."""
    rejected_rewards: torch.Tensor
    """(pairs,) beta * (log pi(rejected) - log ref(rejected)), detached."""
    chosen_logps: torch.Tensor
    """(pairs,) the policy's summed log-probs of the chosen side, detached."""
    rejected_logps: torch.Tensor
    """(pairs,) the policy's summed log-probs of the rejected side, detached."""

    METRICS: ClassVar[tuple[str, ...]] = (
        "loss",
        "dpo_loss",
        "sft_nll",
        "reward_accuracy",
        "reward_margin",
        "reward_chosen",
        "reward_rejected",
        "logps_chosen",
        "logps_rejected",
    )
    """The names of `metrics`, in its order."""

    def metrics(self) -> dict[str, torch.Tensor]:
        """Batch means of what users watch (detached scalars): accuracy, margin, rewards."""
        margins = self.chosen_rewards - self.rejected_rewards
        values = (
            self.loss.detach(),
            self.dpo.detach().mean(),
            self.nll.detach().mean(),
            (margins > 0).float().mean(),
            margins.mean(),
            self.chosen_rewards.mean(),
            self.rejected_rewards.mean(),
            self.chosen_logps.mean(),
            self.rejected_logps.mean(),
        )
        return dict(zip(self.METRICS, values, strict=True))


def dpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float,
    weights: torch.Tensor | None = None,
    sft_weights: torch.Tensor | None = None,
    chosen_tokens: torch.Tensor | None = None,
    lambda_dpo: float = 1.0,
) -> DpoLoss:
    """Sigmoid DPO (Eq. 7) with per-pair weights and the per-pair SFT term of Eq. 9.

    All inputs are (pairs,): summed agent-token log-probs of the policy and the reference;
    `weights` w_i (default 1), `sft_weights` s_i (default 0), `chosen_tokens` the number of
    agent tokens of each chosen trajectory (needed with `sft_weights`).
    With w = 1 and s = 0 this is exactly plain DPO averaged over the batch.
    """
    if beta <= 0:
        raise ValueError(f"DPO beta must be > 0, got {beta}; the paper uses 0.1 to 0.5.")
    weights = torch.ones_like(chosen_logps) if weights is None else weights.to(chosen_logps)
    chosen_ratio = chosen_logps - ref_chosen_logps  # (pairs,)
    rejected_ratio = rejected_logps - ref_rejected_logps
    dpo = -F.logsigmoid(beta * (chosen_ratio - rejected_ratio))
    # No test of the weights' values: on a GPU that would wait for it (a host sync). A zero
    # s_i adds an exact 0 to its pair's loss and gradient.
    if sft_weights is not None and chosen_tokens is None:
        raise ValueError("dpo_loss needs chosen_tokens when sft_weights are given.")
    if chosen_tokens is None:
        nll = torch.zeros_like(chosen_logps)
    else:
        nll = -chosen_logps / chosen_tokens.to(chosen_logps).clamp(min=1)
    term = lambda_dpo * dpo
    if sft_weights is not None:
        term = term + sft_weights.to(chosen_logps) * nll
    per_pair = weights * term
    return DpoLoss(
        loss=per_pair.mean(),
        per_pair=per_pair,
        dpo=dpo,
        nll=nll,
        chosen_rewards=beta * chosen_ratio.detach(),
        rejected_rewards=beta * rejected_ratio.detach(),
        chosen_logps=chosen_logps.detach(),
        rejected_logps=rejected_logps.detach(),
    )


def group_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, *, scale: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO's group-relative advantages: each reward minus its group's mean.

    rewards: (episodes,); groups: (episodes,) integer group ids (one group = the K samples of
    one task). With `scale` the difference is divided by the group's standard deviation
    (population, + eps) as in GRPO; `scale=False` keeps the raw difference (Dr. GRPO). A group
    whose samples all score the same gets advantage 0: it carries no signal. -> (episodes,)
    """
    if rewards.shape != groups.shape or rewards.dim() != 1:
        raise ValueError(
            f"group_advantages needs rewards and groups of one shape (episodes,), got "
            f"{tuple(rewards.shape)} and {tuple(groups.shape)}."
        )
    rewards = rewards.float()
    _, index = torch.unique(groups, return_inverse=True)
    n_groups = int(index.max()) + 1 if index.numel() else 0
    count = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device)
    count.index_add_(0, index, torch.ones_like(rewards))
    mean = torch.zeros_like(count).index_add_(0, index, rewards) / count
    centred = rewards - mean[index]
    if not scale:
        return centred
    var = torch.zeros_like(count).index_add_(0, index, centred**2) / count
    return centred / (var.sqrt()[index] + eps)


@dataclass(frozen=True)
class GrpoLoss:
    """The clipped policy-gradient objective of a batch of episodes, with what users watch."""

    loss: torch.Tensor
    """() the token mean of `per_token` over every agent token in the batch."""
    per_token: torch.Tensor
    """(episodes, seq) policy-gradient term + beta * KL term, 0 off the mask."""
    clipped: torch.Tensor
    """(episodes, seq) bool: the clipped surrogate was the one taken (no gradient there)."""
    kl: torch.Tensor
    """(episodes, seq) the k3 estimate of KL(policy || reference), detached, 0 off the mask."""
    ratio: torch.Tensor
    """(episodes, seq) pi / pi_old, detached."""
    mask: torch.Tensor
    """(episodes, seq) bool: the agent tokens."""

    def sums(self) -> dict[str, torch.Tensor]:
        """Sums over the agent tokens (detached scalars) of the loss, the clipped tokens, the
        ratio and the KL: a step adds them over its micro-batches and processes, then divides
        by its token count (so its means weigh every token alike)."""
        return {
            "loss": self.per_token.detach().sum(),
            "clip_fraction": (self.clipped & self.mask).sum(),
            "ratio": torch.where(self.mask, self.ratio, 0.0).sum(),
            "kl": self.kl.sum(),
        }


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
) -> GrpoLoss:
    """PPO-style clipped surrogate with group-relative advantages, over agent tokens only.

    logps, old_logps, ref_logps: (episodes, seq) per-token log-probs of the agent's tokens
    under the policy being trained, the policy that sampled them and the reference; advantages:
    (episodes,) from `group_advantages`; mask: (episodes, seq), 1 on the agent's tokens (the
    observations an env wrote are never trained on). Per token,

        -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A) + beta * k3,
        r = exp(logps - old_logps),  k3 = exp(ref - logps) - (ref - logps) - 1,

    averaged over every agent token of the batch (token-mean aggregation: long episodes weigh
    by their length). The clip range 0.2 / 0.28 ("clip-higher") is the one reported for a
    public code base close to CoEvolve, which also uses beta = 0.001 with a reference; beta
    defaults to 0 here (no reference model needed), as in TRL's GRPOTrainer.
    """
    if logps.shape != old_logps.shape or logps.shape != mask.shape:
        raise ValueError(
            f"grpo_loss needs logps, old_logps and mask of one shape (episodes, seq), got "
            f"{tuple(logps.shape)}, {tuple(old_logps.shape)} and {tuple(mask.shape)}."
        )
    if advantages.shape != logps.shape[:1]:
        raise ValueError(f"advantages must be (episodes,), got {tuple(advantages.shape)}.")
    if beta and ref_logps is None:
        raise ValueError("grpo_loss with beta > 0 needs ref_logps.")
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip ranges must be >= 0, got {clip_low} and {clip_high}.")
    mask = mask.to(torch.bool)
    logps = logps.float()
    # Off-mask positions are replaced before exp so that padding values cannot overflow.
    delta = torch.where(mask, logps - old_logps.float(), 0.0)
    ratio = torch.exp(delta)
    adv = advantages.float()[:, None]  # (episodes, 1)
    unclipped = ratio * adv
    clipped_ratio = ratio.clamp(1 - clip_low, 1 + clip_high)
    surrogate = torch.minimum(unclipped, clipped_ratio * adv)
    per_token = -surrogate
    kl = torch.zeros_like(logps)
    if ref_logps is not None:
        log_ref_ratio = torch.where(mask, ref_logps.float() - logps, 0.0)
        kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
        if beta:
            per_token = per_token + beta * kl
    per_token = torch.where(mask, per_token, 0.0)
    loss = per_token.sum() / mask.sum().clamp(min=1)
    return GrpoLoss(
        loss=loss,
        per_token=per_token,
        clipped=(clipped_ratio * adv < unclipped).detach(),
        kl=torch.where(mask, kl, 0.0).detach(),
        ratio=ratio.detach(),
        mask=mask,
    )
