"""Key/value caches for decoding: room reserved for new tokens, and per-episode sessions.

`new_cache` gives a transformers `DynamicCache` whose full-attention layers write new
keys/values into reserved room, already holding each row's cached prefix; `Session` is what
`HFPolicy` keeps per episode between steps.
"""

from __future__ import annotations

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
    drop is then freed at once rather than held by the sessions viewing it)."""


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


def new_cache(
    config: Any,
    reserve: int,
    prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None] | None = None,
    width: int = 0,
) -> Any:
    """A DynamicCache whose full-attention layers fill reserved room instead of concatenating.

    With `prefixes` (one per batch row: per-layer (keys, values) of shape
    (kv_heads, tokens, head_dim), or None for a row with nothing cached) the cache starts
    `width` slots long, each row's prefix right-aligned in them and zeros before it; the
    zeros are masked by the caller but must be finite, since 0 * NaN is NaN in attention.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    growing = None
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        growing = _growing_layer_class()
        cache.layers = [growing(reserve) for _ in cache.layers]
    # sliding-window or other layer kinds keep their own behaviour
    donor = next((p for p in prefixes or [] if p), None)
    if not width or donor is None:
        return cache
    room = width + reserve if growing is not None else width
    for layer, (k0, v0) in enumerate(donor):
        keys = k0.new_empty((len(prefixes), k0.shape[0], room, k0.shape[-1]))
        values = v0.new_empty((len(prefixes), v0.shape[0], room, v0.shape[-1]))
        for row, prefix in enumerate(prefixes):
            start = width - (prefix[layer][0].shape[1] if prefix else 0)
            keys[row, :, :start] = 0
            values[row, :, :start] = 0
            if prefix:
                keys[row, :, start:width] = prefix[layer][0]
                values[row, :, start:width] = prefix[layer][1]
        if growing is not None:
            cache.layers[layer].adopt(keys, values, width)
        else:
            cache.update(keys, values, layer)
    return cache


def common_prefix(a: list[int], b: list[int]) -> int:
    if len(a) <= len(b) and b[: len(a)] == a:  # the usual case, compared in C
        return len(a)
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
