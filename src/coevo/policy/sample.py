"""Choosing each row's next token: greedy, or temperature / top-p sampling by inverse CDF.

Every row draws one uniform number from its own generator, then the whole batch is sampled
in one vectorised step: a row's sample depends on its seed alone, never on its batch
neighbours, and no per-row kernel runs over the vocabulary.
"""

from __future__ import annotations

import torch

from coevo.policy.base import Sampling


def uniforms(generators: list[torch.Generator | None], device: torch.device) -> torch.Tensor:
    """One draw in [0, 1) per row (rows, ); a row without a generator (finished) gets 0."""
    if generators and all(g is generators[0] for g in generators):
        return torch.rand(len(generators), generator=generators[0], device=device)
    draws = [
        torch.rand((), generator=g, device=device) if g is not None else None for g in generators
    ]
    zero = torch.zeros((), device=device)
    return torch.stack([d if d is not None else zero for d in draws])


def filtered_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The sampling distribution (rows, vocab): temperature, then top-p (nucleus) filtering."""
    probs = torch.softmax(logits / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Drop a token when the tokens ranked above it already reach top_p.
        drop = sorted_probs.cumsum(-1) - sorted_probs >= sampling.top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    return probs


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Token i of each row with cdf[i-1] <= u * total < cdf[i]: never a zero-probability one."""
    cdf = probs.cumsum(-1)  # (rows, vocab)
    total = cdf[:, -1:]
    target = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True)[:, 0]


def choose(
    logits: torch.Tensor, sampling: Sampling, generators: list[torch.Generator | None]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row and its log-prob under the unmodified model distribution."""
    if logits.dtype != torch.float64:
        logits = logits.float()  # (rows, vocab)
    if sampling.greedy:
        chosen = logits.argmax(-1)
    else:
        chosen = inverse_cdf(filtered_probs(logits, sampling), uniforms(generators, logits.device))
    logp = torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None])[:, 0]
    return chosen, logp  # (rows,), (rows,)
