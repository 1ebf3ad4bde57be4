"""Key/value caches for decoding: room reserved for new tokens, and per-episode sessions.

`prefix_buffers` lays a batch's cached prefixes out side by side (`fill_prefixes` into
buffers that exist: the fixed-shape decoding of `coevo.policy.static_decode`) and `cache_over`
makes a transformers `DynamicCache` over them whose layers write new keys/values into reserved
room (or into row slices, for a prefill fed in groups); `new_cache` serves models with other
layer kinds. `Session` is what `HFPolicy` keeps per episode between steps, and
`cache_keyword` the name under which its model's forward takes a cache.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Session:
    """What a session key holds: the token ids seen and their per-layer keys and values."""

    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (kv_heads, len(ids), head_dim)
    """Views into the batch cache the episode last ran in, so keeping them copies nothing;
    `HFPolicy` copies them out only when that batch drops rows (the cache from before the
    drop is then freed at once rather than held by the sessions viewing it). Fixed-shape
    decoding reuses its buffers for the next call, so its sessions view one copy per call of
    the slots its rows used."""


def _growing_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A DynamicLayer that writes new keys/values into reserved room.

        The stock layer concatenates at every decoding step, copying the whole cache each
        time; on CPU that copy cost more than the attention itself.
        """

        def __init__(self, reserve: int) -> None:
            super().__init__()
            self.reserve = reserve
            self.length = 0
            self.key_buffer: torch.Tensor | None = None
            self.value_buffer: torch.Tensor | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            if self.key_buffer is None or end > self.key_buffer.shape[-2]:
                room = max(end + self.reserve, end * 3 // 2)
                self.key_buffer = self._grow(self.key_buffer, key_states, room)
                self.value_buffer = self._grow(self.value_buffer, value_states, room)
            self.key_buffer[:, :, self.length : end] = key_states
            self.value_buffer[:, :, self.length : end] = value_states
            self.length = end
            self.keys = self.key_buffer[:, :, :end]  # (batch, kv_heads, seq, head_dim) views
            self.values = self.value_buffer[:, :, :end]
            return self.keys, self.values

        def _grow(self, old: torch.Tensor | None, new: torch.Tensor, room: int) -> torch.Tensor:
            shape = (*new.shape[:2], room, new.shape[-1])
            buffer = new.new_empty(shape)
            if old is not None and self.length:
                buffer[:, :, : self.length] = old[:, :, : self.length]
            return buffer

        def adopt(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
            """Take buffers (batch, kv_heads, room, head_dim) whose first `length` slots are
            filled: the cache starts from them without another copy."""
            self.lazy_initialization(keys, values)
            self.key_buffer, self.value_buffer, self.length = keys, values, length
            self.keys, self.values = keys[:, :, :length], values[:, :, :length]

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.key_buffer is not None:
                self.key_buffer = self.key_buffer[indices]
                self.value_buffer = self.value_buffer[indices]
                self.keys = self.key_buffer[:, :, : self.length]
                self.values = self.value_buffer[:, :, : self.length]

    return GrowingLayer


@dataclass(frozen=True)
class KvLayout:
    """What a model's key/value cache holds per layer: (rows, kv_heads, slots, head_dim)."""

    layers: int
    kv_heads: int
    head_dim: int


def kv_layout(config: Any) -> KvLayout | None:
    """The layout of a model whose every layer keeps a plain growing cache (full attention),
    from its config; None for other models (sliding-window layers, or a config that does not
    state its head sizes)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers = DynamicCache(config=config).layers
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None)
    if head_dim is None and heads:
        head_dim = getattr(config, "hidden_size", 0) // heads
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    if not kv_heads or not head_dim:
        return None
    return KvLayout(len(layers), kv_heads, head_dim)


def prefix_buffers(
    layout: KvLayout,
    prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None],
    ends: list[int],
    room: int,
    *,
    dtype: torch.dtype,
    device: torch.device,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values), (rows, kv_heads, room, head_dim): row i holds its prefix
    (per layer (kv_heads, tokens, head_dim), or None for nothing cached) ending at slot
    `ends[i]`, zeros before it. The zeros are masked by the caller but must be finite, since
    0 * NaN is NaN in attention; slots from `ends[i]` on are left for the model to write.

    Each prefix list is emptied (its layers set to None) as its layers are copied, so old
    caches nothing else holds are freed while the new buffers fill: the peak is about one
    batch of caches, not two (a rollout's caches run to gigabytes at long contexts)."""
    shape = (len(prefixes), layout.kv_heads, room, layout.head_dim)
    buffers = []
    lengths = [prefix[0][0].shape[1] if prefix else 0 for prefix in prefixes]
    for layer in range(layout.layers):
        keys = torch.empty(shape, dtype=dtype, device=device)
        values = torch.empty(shape, dtype=dtype, device=device)
        for row, (prefix, end) in enumerate(zip(prefixes, ends, strict=True)):
            start = end - lengths[row]
            keys[row, :, :start] = 0
            values[row, :, :start] = 0
            if prefix:
                keys[row, :, start:end] = prefix[layer][0]
                values[row, :, start:end] = prefix[layer][1]
                prefix[layer] = None  # type: ignore[call-overload]
        buffers.append((keys, values))
    return buffers


def fill_prefixes(
    buffers: list[tuple[torch.Tensor, torch.Tensor]],
    prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None],
    ends: list[int],
) -> None:
    """`prefix_buffers` into given buffers (rows, kv_heads, room, head_dim) per layer, a few
    kernels per layer rather than a few per row and layer (on a GPU each is a launch): row i's
    prefix is written to end at slot `ends[i]`. The slots before are left as they are (the
    caller keeps them finite and masks them); prefixes are emptied as `prefix_buffers` does."""
    lengths = [prefix[0][0].shape[1] if prefix else 0 for prefix in prefixes]
    rows = [i for i, n in enumerate(lengths) if n]
    if not rows:
        return
    device = buffers[0][0].device
    counts = torch.tensor([lengths[i] for i in rows])
    starts = torch.tensor([ends[i] - lengths[i] for i in rows])
    # (tokens,): each cached token's row and slot, the rows one after another
    row_index = torch.repeat_interleave(torch.tensor(rows), counts)
    before = torch.repeat_interleave(counts.cumsum(0) - counts, counts)  # its row's first
    slot_index = torch.repeat_interleave(starts, counts) + torch.arange(len(before)) - before
    row_index, slot_index = row_index.to(device), slot_index.to(device)
    for layer, (keys, values) in enumerate(buffers):
        for target, part in ((keys, 0), (values, 1)):
            # (kv_heads, tokens, head_dim): one copy of every row's prefix, then one scatter
            tokens = torch.cat([prefixes[i][layer][part] for i in rows], dim=1)
            target[row_index, :, slot_index] = tokens.transpose(0, 1)
        for i in rows:
            prefixes[i][layer] = None  # type: ignore[call-overload]


def cache_over(
    config: Any, buffers: list[tuple[torch.Tensor, torch.Tensor]], length: int, reserve: int
) -> Any:
    """A DynamicCache of growing layers over `buffers` (from `prefix_buffers`, or row slices
    of them: the model then writes into those rows in place), their first `length` slots
    filled; a layer that needs more room than the buffers have copies into larger ones."""
    from transformers import DynamicCache

    growing = _growing_layer_class()
    cache = DynamicCache(config=config)
    cache.layers = [growing(reserve) for _ in buffers]
    for layer, (keys, values) in zip(cache.layers, buffers, strict=True):
        layer.adopt(keys, values, length)
    return cache


def new_cache(
    config: Any,
    prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None] | None = None,
    width: int = 0,
) -> Any:
    """A DynamicCache for models that `kv_layout` does not describe (sliding-window layers
    keep their own behaviour): with `prefixes` (as `prefix_buffers` takes them) it starts
    `width` slots long, each row's prefix right-aligned in them and zeros before it."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    donor = next((p for p in prefixes or [] if p), None)
    if not width or donor is None:
        return cache
    keys, _ = donor[0]  # (kv_heads, tokens, head_dim)
    layout = KvLayout(len(donor), keys.shape[0], keys.shape[-1])
    ends = [width] * len(prefixes)
    buffers = prefix_buffers(layout, prefixes, ends, width, dtype=keys.dtype, device=keys.device)
    for layer, (k, v) in enumerate(buffers):
        cache.update(k, v, layer)
    return cache


def cache_keyword(model: Any) -> str:
    """The keyword `model`'s forward takes its key/value cache by: `cache` from the
    transformers releases that renamed it (the old `past_key_values` then warns and is to go),
    `past_key_values` before them. A PEFT wrapper passes it on to the model it wraps."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    parameters = inspect.signature(inner.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"
