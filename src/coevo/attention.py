"""The SDPA attention coevo switches models to, for generation and for DPO (both exact).

Generation: grouped-query attention over a cache without copying it. A model with
grouped-query attention (SmolLM2: 9 query heads share 3 key/value heads) runs transformers'
SDPA path by expanding every key and value head to its query heads (`repeat_kv`), a copy of
the whole cache in each layer. For one query token transformers
avoids it by folding the query heads of a group into rows; for more it still copies. A
rollout's prefill has a few new tokens (an observation, an error line) over thousands of
cached ones, so that copy cost more than the attention itself (measured in
`benchmarks/results/rollout_speed.md`).

`packed_sdpa` folds any number of query tokens the same way: the group's heads times the
tokens become the rows of one attention over the group's key/value head, each row with its
token's mask. It is exact (the same products and softmax per row) and used only where a mask
is given (a padded batch over a cache); everything else goes to transformers' own SDPA.

DPO: the same function serves forked rows (`pair_forks`, `forked_sdpa`): a preference pair's
chosen and rejected sides usually open with the same tokens (the instruction, the first page,
often the first exchange), so training sends that prefix through the model once and lets both
continuations attend to it.

SFT: it serves packed rows too (`packed_seqs`, `packed_rows_sdpa`): a batch's sequences one
after another in one row, no padding, each attending to itself only.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple

import torch

NAME = "coevo_sdpa"
HAS_VARLEN = importlib.util.find_spec("torch.nn.attention.varlen") is not None
"""Whether this torch has `varlen_attn` (2.9 on); without it packed rows run per sequence."""


def sdpa_backends(device: torch.device) -> AbstractContextManager:
    """The SDPA kernels attention may run on `device`, for a trainer's loop or a decode.

    On CUDA: flash, memory-efficient or math, never cuDNN. cuDNN's attention plans anew for
    every new key length, on the CPU, and a trainer's length-grouped batches and every decode
    step bring new lengths, so the GPU waits on that planning (issue 37's profile of an H100).
    Elsewhere torch's own choice."""
    if device.type != "cuda":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


def packed_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,  # (batch, heads, tokens, head_dim)
    key: torch.Tensor,  # (batch, kv_heads, slots, head_dim)
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,  # (batch or 1, 1, tokens, slots)
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    forks = kwargs.pop("pair_forks", None)
    if forks is not None:
        return forked_sdpa(module, query, key, value, forks, dropout, scaling, **kwargs)
    packed = kwargs.pop("packed_seqs", None)
    if packed is not None:
        return packed_rows_sdpa(module, query, key, value, packed, dropout, scaling, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, tokens, dim = query.shape
    packable = (
        groups > 1
        and tokens > 1
        and attention_mask is not None
        and attention_mask.shape[1] == 1
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None
    )
    if not packable:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    kv_heads = heads // groups
    # Head h reads key/value head h // groups (repeat_kv's order): rows (group member, token).
    rows = query.reshape(batch, kv_heads, groups * tokens, dim)
    mask = attention_mask.expand(-1, groups, -1, -1)
    mask = mask.reshape(attention_mask.shape[0], 1, groups * tokens, attention_mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(
        rows, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    out = out.reshape(batch, heads, tokens, dim).transpose(1, 2).contiguous()
    return out, None  # (batch, tokens, heads, head_dim), as transformers' own functions


class PairForks(NamedTuple):
    """A row of preference pairs laid out as forks (`coevo.train.batches.collate_forked`: each
    pair's shared prefix, the rest of its chosen side, the rest of its rejected side), and how
    `forked_sdpa` runs its attention: as one padded batch of two rows per pair. Made once per
    batch on the host (`pair_forks`): no layer reads a length back from the device."""

    lengths: torch.Tensor
    """(pairs, 3) int64: each pair's prefix, chosen rest and rejected rest token counts."""
    rows: torch.Tensor
    """(2 * pairs, width) int64: the row positions of each pair's prefix and chosen rest, in
    order (rows 0 .. pairs - 1), then of its prefix and rejected rest (rows pairs ..), each
    padded at the end with the pair's first position; width: the longest of them."""
    take: torch.Tensor
    """(tokens,) int64: where each row position's output lies in the batch's outputs laid end
    to end (2 * pairs x width): the prefix and the chosen rest from the pair's chosen row, the
    rejected rest from its rejected row."""


def pair_forks(lengths: Sequence[tuple[int, int, int]]) -> PairForks:
    """The `PairForks` of pairs with these (prefix, chosen rest, rejected rest) lengths, one
    after another in a row; its tensors on the CPU (a batch's move to the device takes them)."""
    pairs = len(lengths)
    width = max((p + max(c, r) for p, c, r in lengths), default=0)
    rows = torch.zeros((2 * pairs, width), dtype=torch.long)
    take = []
    start = 0
    for i, (p, c, r) in enumerate(lengths):
        rest = start + p + c
        rows[i] = start
        rows[i, : p + c] = torch.arange(start, rest)
        rows[pairs + i] = start
        rows[pairs + i, :p] = torch.arange(start, start + p)
        rows[pairs + i, p : p + r] = torch.arange(rest, rest + r)
        take.append(torch.arange(i * width, i * width + p + c))
        first = (pairs + i) * width + p
        take.append(torch.arange(first, first + r))
        start = rest + r
    return PairForks(
        torch.tensor(lengths, dtype=torch.long).reshape(-1, 3),
        rows,
        torch.cat(take) if take else torch.zeros(0, dtype=torch.long),
    )


def forked_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,  # (1, heads, tokens, head_dim): the pairs one after another
    key: torch.Tensor,  # (1, kv_heads, tokens, head_dim)
    value: torch.Tensor,
    forks: PairForks,
    dropout: float,
    scaling: float | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over pairs laid out as forks (`PairForks`): the prefix and the chosen rest
    attend causally to themselves; the rejected rest attends to the prefix and causally to
    itself, never to the chosen rest.

    One causal SDPA call (the fused kernel, no mask), whatever the number of pairs, over a
    batch of two rows per pair, the prefix + chosen rest and the prefix + rejected rest,
    gathered from the row and padded at the end (a padded query is dropped, and no real query
    sees a padded key: the gradients are exact). The rejected row runs the prefix's queries
    again and drops them, a p^2 / 2 share of attention, against the prefix's whole forward and
    backward saved once. Launches per layer do not grow with the pairs: a gather of each of
    query, key and value, the attention, a gather of its output. (The sides as two batches,
    two calls and a concatenation per layer, dispatched 14,998 ops per DPO step against 12,912
    now, TRL's 11,027: a 30-layer model of the nano's width, 16 pairs, 2026-11-26.)
    The mask is not read: callers pass `fork_mask`, so that the model does not build one.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if forks.take.shape[0] != query.shape[2]:
        raise ValueError(
            f"pair_forks cover {forks.take.shape[0]} tokens but the row holds {query.shape[2]}."
        )
    index = forks.rows
    # (2 * pairs, heads, width, head_dim): each side of each pair gathered into its own row.
    q, k, v = (
        x.index_select(2, index.reshape(-1))
        .view(x.shape[1], *index.shape, x.shape[3])
        .transpose(0, 1)
        for x in (query, key, value)
    )
    out, _ = sdpa_attention_forward(
        module, q, k, v, None, dropout=dropout, scaling=scaling, is_causal=True, **kwargs
    )
    # out: (2 * pairs, width, heads, head_dim)
    return out.flatten(0, 1).index_select(0, forks.take).unsqueeze(0), None


class PackedSeqs(NamedTuple):
    """Sequences laid one after another in one row (SFT without padding), for `packed_sdpa`."""

    lengths: tuple[int, ...]
    """Each sequence's token count, in row order."""
    bounds: torch.Tensor
    """(sequences + 1,) int32, on the row's device: where each sequence starts, then the row's
    end (a varlen kernel's `cu_seqlens`)."""


def packed_rows_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,  # (1, heads, tokens, head_dim): the sequences one after another
    key: torch.Tensor,  # (1, kv_heads, tokens, head_dim)
    value: torch.Tensor,
    packed: PackedSeqs,
    dropout: float,
    scaling: float | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each packed sequence, never across: what a padded batch of
    these sequences computes, without the pads.

    On a CUDA GPU with flash attention (Ampere or newer), in half precision or under half
    autocast, one varlen flash call covers the row (torch's `varlen_attn`); elsewhere one
    causal SDPA call per sequence (the fused kernel, no mask). The mask is not read: callers
    pass `fork_mask`, so that the model builds no (tokens, tokens) one.
    """
    if sum(packed.lengths) != query.shape[2]:
        raise ValueError(
            f"packed_seqs cover {sum(packed.lengths)} tokens but the row holds {query.shape[2]}."
        )
    half = query.dtype if query.dtype in (torch.float16, torch.bfloat16) else None
    if half is None and query.is_cuda and torch.is_autocast_enabled("cuda"):
        # Under autocast with float32 weights the rotary embedding leaves queries and keys in
        # float32; SDPA would run in the autocast dtype, and so does this.
        half = torch.get_autocast_dtype("cuda")
    if half is not None and not dropout and _varlen_kernel(query):
        from torch.nn.attention.varlen import varlen_attn

        q, k, v = (x[0].transpose(0, 1).to(half).contiguous() for x in (query, key, value))
        out = causal_varlen(varlen_attn, q, k, v, packed.bounds, max(packed.lengths), scaling)
        return out.unsqueeze(0), None  # (1, tokens, heads, head_dim)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    parts = []
    start = 0
    for n in packed.lengths:
        rows = slice(start, start + n)
        q, k, v = (x[:, :, rows] for x in (query, key, value))
        out, _ = sdpa_attention_forward(
            module, q, k, v, None, dropout=dropout, scaling=scaling, is_causal=True, **kwargs
        )
        parts.append(out)  # (1, n, heads, head_dim)
        start += n
    return torch.cat(parts, dim=1), None


def causal_varlen(
    varlen_attn: Any,
    q: torch.Tensor,  # (tokens, heads, head_dim)
    k: torch.Tensor,  # (tokens, kv_heads, head_dim)
    v: torch.Tensor,
    bounds: torch.Tensor,
    longest: int,
    scale: float | None,
) -> torch.Tensor:
    """Causal attention within each of the sequences `bounds` delimits, by torch's
    `varlen_attn` as this torch spells it: causal is `window_size=(-1, 0)` where it takes that
    (`is_causal=True` in older torches), grouped-query heads `enable_gqa` where it takes that
    (added to torch in April 2026: the GPU image's 2.11 takes `scale` and `window_size` but not
    it, as read in its wheel; without it each key/value head is repeated for its query heads,
    as transformers' `repeat_kv` does), and `scale` where it takes that (torch 2.10, the lowest
    coevo runs on, takes neither it nor `window_size`: the queries are scaled instead, against
    the kernel's 1 / sqrt(head_dim))."""
    gqa, window, scaled = _varlen_spelling(varlen_attn)
    options: dict[str, Any] = {}
    if scaled:
        options["scale"] = scale
    elif scale is not None:
        q = q * (scale * math.sqrt(q.shape[-1]))
    if q.shape[1] != k.shape[1]:
        if gqa:
            options["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = (x.repeat_interleave(groups, dim=1) for x in (k, v))
    if window:
        options["window_size"] = (-1, 0)
    else:
        options["is_causal"] = True
    return varlen_attn(q, k, v, bounds, bounds, longest, longest, **options)


def _asked_once(question: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`question` answered once per argument (`.answers`), and a constant to the compiler when
    compiled layers ask it (`assume_constant_result`: called, not traced; dynamo would trace
    through a `functools.cache`)."""

    @torch.compiler.assume_constant_result
    @functools.wraps(question)
    def ask(key: Any) -> Any:
        if key not in ask.answers:
            ask.answers[key] = question(key)
        return ask.answers[key]

    ask.answers = {}
    return ask


@_asked_once
def _varlen_spelling(varlen_attn: Any) -> tuple[bool, bool, bool]:
    """Whether `varlen_attn` takes `enable_gqa`, `window_size`, and `scale`."""
    takes = inspect.signature(varlen_attn).parameters
    return "enable_gqa" in takes, "window_size" in takes, "scale" in takes


def _varlen_kernel(query: torch.Tensor) -> bool:
    """Whether torch's varlen flash kernel takes these queries: a torch that has it, CUDA, an
    Ampere or newer GPU, a head size it was built for."""
    if not (query.is_cuda and HAS_VARLEN):
        return False
    dim = query.shape[-1]
    return _flash_gpu(query.device.index or 0) and dim % 8 == 0 and dim <= 256


@_asked_once
def _flash_gpu(index: int) -> bool:
    """Whether GPU `index` is Ampere or newer."""
    return torch.cuda.get_device_capability(index) >= (8, 0)


def fork_mask(device: torch.device) -> torch.Tensor:
    """The attention mask to give a model with `pair_forks`: transformers passes a 4-D mask
    on as it is, where from restarting position ids it would build a (tokens, tokens) one
    (490 MB at 13,000 tokens, and CPU time to fill it; benchmarks/results/dpo_speed.md) that
    `forked_sdpa` never reads."""
    return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)


def use_packed_attention(model: Any) -> bool:
    """Switch a transformers model that runs SDPA to `packed_sdpa`; False (and unchanged)
    for a model on another attention implementation or one that cannot switch."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == NAME:
        return True
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, packed_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks SDPA gets
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME
