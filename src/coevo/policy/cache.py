"""Key/value caches for decoding: room reserved for new tokens, and per-episode sessions.

`prefix_buffers` lays a batch's cached prefixes out side by side (`fill_prefixes` into
buffers that exist: the fixed-shape decoding of `coevo.policy.static_decode`) and `cache_over`
makes a transformers `DynamicCache` over them whose layers write new keys/values into reserved
room (or into row slices, for a prefill fed in groups); `new_cache` serves models with other
layer kinds. `Session` is what `HFPolicy` keeps per episode between steps (its row of a
batch's cache, a `Block`; `Prefix` the part of it a prefill copies), and `cache_keyword` the
name under which its model's forward takes a cache.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import torch

Block = list[tuple[torch.Tensor, torch.Tensor] | None]
"""Per layer (keys, values), (rows, kv_heads, slots, head_dim): a batch's cache, which the
sessions of its rows share (a layer is None once a prefill has copied it out and no session
needs it any more)."""


@dataclass(frozen=True)
class Prefix:
    """The first `length` cached tokens of one row of a block: slots start .. start + length."""

    block: Block
    row: int
    start: int
    length: int


@dataclass(frozen=True)
class Session:
    """What a session key holds: the token ids seen and where their keys and values are, row
    `row` of `block` from slot `start` on.

    The block is the batch cache the episode last ran in, shared with the other rows' sessions,
    so keeping a session copies nothing and makes no per-layer view (on a GPU's host, views
    per row and layer cost more than the copy). `HFPolicy` copies a row out only when its batch
    drops rows (the cache from before the drop is then freed at once rather than held by the
    sessions viewing it). Fixed-shape decoding reuses its buffers for the next call, so its
    sessions share one copy per call of the slots its rows used."""

    ids: list[int]
    block: Block
    row: int
    start: int

    @property
    def kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values) views, (kv_heads, len(ids), head_dim)."""
        span = slice(self.start, self.start + len(self.ids))
        return [(k[self.row, :, span], v[self.row, :, span]) for k, v in self.block]  # type: ignore[misc]

    def prefix(self, length: int) -> Prefix:
        """Its first `length` tokens, for a prefill to copy."""
        return Prefix(self.block, self.row, self.start, length)

    def owned(self) -> Session:
        """The same session over a copy of its own rows' slots (a block of one row)."""
        kv = [(k[None].clone(), v[None].clone()) for k, v in self.kv]
        return Session(self.ids, kv, 0, 0)  # type: ignore[arg-type]


@functools.cache
def _growing_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A DynamicLayer that writes new keys/values into reserved room.

        The stock layer concatenates at every decoding step, copying the whole cache each
        time; on CPU that copy cost more than the attention itself. Its `keys` and `values`
        are views of the buffers made where they are read, never held beside them: a
        compiled forward then takes one tensor per buffer (a buffer and a view of it, both
        handed in and one written, made torch.compile fail at the second turn's prefill).
        """

        def __init__(self, reserve: int) -> None:
            super().__init__()
            self.reserve = reserve
            self.length = 0
            self.key_buffer: torch.Tensor | None = None
            self.value_buffer: torch.Tensor | None = None

        @property
        def keys(self) -> torch.Tensor | None:  # (batch, kv_heads, length, head_dim)
            if self.key_buffer is None:
                return self._keys
            return self.key_buffer[:, :, : self.length]

        @keys.setter
        def keys(self, value: torch.Tensor | None) -> None:  # DynamicLayer's empty start
            self._held("keys", value)
            self._keys = value

        @property
        def values(self) -> torch.Tensor | None:
            if self.value_buffer is None:
                return self._values
            return self.value_buffer[:, :, : self.length]

        @values.setter
        def values(self, value: torch.Tensor | None) -> None:
            self._held("values", value)
            self._values = value

        def _held(self, name: str, value: torch.Tensor | None) -> None:
            """Refuse to set what the buffers hold (a stock method that would crop, offload or
            repeat the cache): it would be lost at the next read, silently."""
            if value is not None and getattr(self, "key_buffer", None) is not None:
                raise NotImplementedError(
                    f"This cache layer keeps its {name} in its buffers; setting them is not "
                    "supported (crop, offload and repeat are not)."
                )

        def get_seq_length(self) -> int:
            return self.length

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

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.key_buffer is not None:
                self.key_buffer = self.key_buffer[indices]
                self.value_buffer = self.value_buffer[indices]

        def reset(self) -> None:
            self.key_buffer = self.value_buffer = None
            self.length = 0
            super().reset()

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
    prefixes: list[Prefix | None],
    ends: list[int],
    room: int,
    *,
    dtype: torch.dtype,
    device: torch.device,
    free: frozenset[int] = frozenset(),
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values), (rows, kv_heads, room, head_dim): row i holds its prefix
    (None: nothing cached) ending at slot `ends[i]`, zeros before it. The zeros are masked by
    the caller but must be finite, since 0 * NaN is NaN in attention; slots from `ends[i]` on
    are left for the model to write.

    The blocks whose `id` is in `free` (those no session outside this batch needs) lose each
    layer as soon as it is copied, so old caches are freed while the new buffers fill: the peak
    is about one batch of caches, not two (a rollout's caches run to gigabytes at long
    contexts)."""
    shape = (len(prefixes), layout.kv_heads, room, layout.head_dim)
    buffers = []
    for layer in range(layout.layers):
        keys = torch.empty(shape, dtype=dtype, device=device)
        values = torch.empty(shape, dtype=dtype, device=device)
        for row, (prefix, end) in enumerate(zip(prefixes, ends, strict=True)):
            start = end - (prefix.length if prefix else 0)
            keys[row, :, :start] = 0
            values[row, :, :start] = 0
            if prefix and prefix.length:
                k, v = prefix.block[layer]  # type: ignore[misc]
                span = slice(prefix.start, prefix.start + prefix.length)
                keys[row, :, start:end] = k[prefix.row, :, span]
                values[row, :, start:end] = v[prefix.row, :, span]
        _release(prefixes, layer, free)
        buffers.append((keys, values))
    return buffers


def _release(prefixes: list[Prefix | None], layer: int, free: frozenset[int]) -> None:
    for prefix in prefixes:
        if prefix is not None and id(prefix.block) in free:
            prefix.block[layer] = None


def fill_prefixes(
    buffers: list[tuple[torch.Tensor, torch.Tensor]],
    prefixes: list[Prefix | None],
    ends: list[int],
    free: frozenset[int] = frozenset(),
) -> None:
    """`prefix_buffers` into given buffers (rows, kv_heads, room, head_dim) per layer, a few
    kernels per layer and block rather than a few per row and layer (on a GPU each is a
    launch): row i's prefix is written to end at slot `ends[i]`. The slots before are left as
    they are (the caller keeps them finite and masks them); `free` as `prefix_buffers`."""
    groups: dict[int, list[int]] = {}  # block -> the rows whose prefixes it holds
    for i, prefix in enumerate(prefixes):
        if prefix is not None and prefix.length:
            groups.setdefault(id(prefix.block), []).append(i)
    if not groups:
        return
    device = buffers[0][0].device
    moves = []  # per block: its rows' (target row, target slot, source row, source slot)
    for rows in groups.values():
        ps: list[Prefix] = [prefixes[i] for i in rows]  # type: ignore[misc]
        counts = torch.tensor([p.length for p in ps])
        # (tokens,): each cached token's place, the rows one after another
        before = torch.repeat_interleave(counts.cumsum(0) - counts, counts)  # its row's first
        offset = torch.arange(len(before)) - before  # its place within its row's prefix
        per_row = torch.tensor(
            [[i, ends[i] - p.length, p.row, p.start] for i, p in zip(rows, ps, strict=True)]
        )
        row, slot, source_row, source_slot = torch.repeat_interleave(per_row, counts, dim=0).T
        index = (row, slot + offset, source_row, source_slot + offset)
        moves.append((ps[0].block, *(t.to(device) for t in index)))
    for layer, target in enumerate(buffers):
        for block, row, slot, source_row, source_slot in moves:
            for part in (0, 1):  # one gather of the block's rows' tokens, one scatter
                source = block[layer][part]  # (rows, kv_heads, slots, head_dim)
                target[part][row, :, slot] = source[source_row, :, source_slot]
        _release(prefixes, layer, free)


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
    prefixes: list[Prefix | None] | None = None,
    width: int = 0,
    free: frozenset[int] = frozenset(),
) -> Any:
    """A DynamicCache for models that `kv_layout` does not describe (sliding-window layers
    keep their own behaviour): with `prefixes` (as `prefix_buffers` takes them) it starts
    `width` slots long, each row's prefix right-aligned in them and zeros before it."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    donor = next((p for p in prefixes or [] if p), None)
    if not width or donor is None:
        return cache
    keys, _ = donor.block[0]  # type: ignore[misc]  # (rows, kv_heads, slots, head_dim)
    layout = KvLayout(len(donor.block), keys.shape[1], keys.shape[-1])
    ends = [width] * len(prefixes)  # type: ignore[arg-type]
    buffers = prefix_buffers(
        layout,
        prefixes,
        ends,
        width,
        dtype=keys.dtype,
        device=keys.device,
        free=free,  # type: ignore[arg-type]
    )
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
