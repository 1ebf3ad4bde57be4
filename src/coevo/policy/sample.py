"""Choosing each row's next token: greedy, or temperature / top-p sampling by inverse CDF.

Every row draws all its uniform numbers (one per step) from its own generator before decoding
starts (`draws`), then each step samples the whole batch in one vectorised step (`choose`): a
row's sample depends on its seed alone, never on its batch neighbours, no per-row kernel runs
over the vocabulary, and every decoding path (eager or fixed-shape) reads the same numbers.
"""

from __future__ import annotations

import torch

from coevo.policy.base import Sampling


def draws(
    generators: list[torch.Generator | None], steps: int, device: torch.device
) -> torch.Tensor | None:
    """Each row's uniform in [0, 1) for every step (rows, steps); None when greedy (no
    generators). Drawn in one call per generator, so the numbers a seed gives do not depend on
    how a decoding loop would have asked for them. A generator shared by all rows fills the
    steps in order, every row's draw of step t before any of step t + 1."""
    first = generators[0] if generators else None
    if first is None:
        return None
    if all(g is first for g in generators):
        return torch.rand((steps, len(generators)), generator=first, device=device).T
    return torch.stack([torch.rand(steps, generator=g, device=device) for g in generators])


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
    logits: torch.Tensor, sampling: Sampling, u: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row from each row's uniform `u` (rows,) (greedy, or None: the argmax),
    and its log-prob under the unmodified model distribution."""
    if logits.dtype != torch.float64:
        logits = logits.float()  # (rows, vocab)
    if sampling.greedy or u is None:
        chosen = logits.argmax(-1)
    else:
        chosen = inverse_cdf(filtered_probs(logits, sampling), u)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None])[:, 0]
    return chosen, logp  # (rows,), (rows,)
