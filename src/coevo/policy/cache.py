"""Key/value caches for decoding: room reserved for new tokens, and per-episode sessions.

`new_cache` gives a transformers `DynamicCache` whose full-attention layers write new
keys/values into reserved room; `Session` is what `HFPolicy` keeps per episode between steps.
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

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.key_buffer is not None:
                self.key_buffer = self.key_buffer[indices]
                self.value_buffer = self.value_buffer[indices]
                self.keys = self.key_buffer[:, :, : self.length]
                self.values = self.value_buffer[:, :, : self.length]

    return GrowingLayer


def new_cache(config: Any, reserve: int) -> Any:
    """A DynamicCache whose full-attention layers fill reserved room instead of concatenating."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        growing = _growing_layer_class()
        cache.layers = [growing(reserve) for _ in cache.layers]
    return cache  # sliding-window or other layer kinds keep their own behaviour


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
