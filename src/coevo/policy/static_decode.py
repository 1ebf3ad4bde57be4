"""Decoding over a fixed-shape key/value cache, so that a step can be compiled and, on CUDA,
captured once as a CUDA graph and replayed for every token.

Why: a small model decoding on a GPU waits on kernel launches, not on the GPU (a profiled
batched decode spent many times more CPU time launching kernels than GPU time running them;
docs/models.md). A replayed graph launches a whole step at once, and a
compiled step has fewer kernels to launch.

Why coevo's cache fits: `HFPolicy._prefill` right-aligns every row's real tokens to end at
slot `total` (pads on the left), so every row writes its next key/value at the same slot,
`total + step`: one write position for the batch, transformers' `StaticLayer` semantics.
The step then runs over (rows, kv_heads, room, head_dim) buffers with a (rows, room) mask,
true on each row's real slots and on the slots decoded so far: every step has the same
shapes. Rows and room are rounded up to buckets (`rows_bucket`, `room_bucket`) so that a
few captures serve a whole run; the buckets' buffers are views of one storage per layer
(`StaticDecoder`'s arena) that lives as long as the model, so a capture stays valid across
calls. A graph reads the weights by address: an in-place update (an optimizer step) is
played by the next replay, with no recapture and no copy.

Finished rows stay in the batch (dropping them would change the shapes), masked and
ignored. Sampling runs on the device from uniforms drawn before the loop; stop ids are
found on the device; the host looks only every few tokens (`Decoding.advance`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
import weakref
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from coevo.policy.base import Sampling
from coevo.policy.cache import KvLayout
from coevo.policy.fused import FusedProjections
from coevo.policy.sample import choose

MODES = ("auto", "eager", "static", "graphs")
"""`HFPolicy(decode=...)`: `eager` the growing-cache loop; `static` this module's loop, neither
compiled nor captured (the CPU, debugging); `graphs` the same, its forward compiled and, on
CUDA, captured as CUDA graphs; `auto` graphs on CUDA, eager elsewhere."""

ROOM_STEP = 256
"""Cache slots are allocated in multiples of this: one capture per few turns of growth."""

STATIC_ATTENTION = "coevo_static_sdpa"
SDPA = ("sdpa", "coevo_sdpa")  # the attention the step's 4-D boolean mask is made for


def serves(model: Any) -> bool:
    """Whether the fixed-shape loop can run `model`: SDPA attention (other attention
    functions want other masks). Its cache layout is for the caller to check (`kv_layout`)."""
    return getattr(model.config, "_attn_implementation", None) in SDPA


def rows_bucket(rows: int) -> int:
    """Batch rows a step runs: the next power of two from 2 up to 64, then multiples of 64.
    Pad rows cost little on a GPU, while every bucket is a capture; not 1, which torch.compile
    would compile apart (it specializes sizes 0 and 1)."""
    if rows <= 64:
        return max(2, 1 << max(rows - 1, 0).bit_length())
    return -(-rows // 64) * 64


def room_bucket(slots: int) -> int:
    """Cache slots a step attends over: `slots` rounded up to a multiple of `ROOM_STEP`."""
    return -(-slots // ROOM_STEP) * ROOM_STEP


def slot_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,  # (batch, heads, tokens, head_dim)
    key: torch.Tensor,  # (batch, kv_heads, slots, head_dim)
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,  # (batch, 1, tokens, slots)
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA for the static step: one query token folds its group's query heads into rows over
    their key/value head, as transformers does uncompiled; compiled, transformers copies every
    key/value head per query head instead (`repeat_kv`, the whole cache each layer and step)."""
    from coevo.attention import packed_sdpa

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, tokens, dim = query.shape
    if tokens != 1 or groups == 1 or attention_mask is None or attention_mask.shape[1] != 1:
        return packed_sdpa(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    rows = query.reshape(batch, heads // groups, groups, dim)  # head h -> kv head h // groups
    out = torch.nn.functional.scaled_dot_product_attention(
        rows, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def static_attention(model: Any) -> Iterator[None]:
    """Run `model` on `slot_sdpa` inside the block, when it runs SDPA (ours or transformers').

    Only while a step is traced, captured or run uncompiled: the prefill, training and a
    replayed graph never see it."""
    config = model.config
    before = getattr(config, "_attn_implementation", None)
    if before not in SDPA:
        yield
        return
    _register_static_attention()
    config._attn_implementation_internal = STATIC_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation_internal = before


@functools.cache
def _register_static_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(STATIC_ATTENTION, slot_sdpa)
    AttentionMaskInterface.register(STATIC_ATTENTION, sdpa_mask)


@functools.cache
def _slot_layer_class() -> type:
    from transformers.cache_utils import StaticLayer

    class SlotLayer(StaticLayer):
        """A StaticLayer over buffers it is given (no copy), writing at the batch's one
        write position `slot`, a (1,) tensor shared by all layers and advanced by the step."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, slot: torch.Tensor):
            super().__init__(max_cache_len=keys.shape[-2])
            self.device = keys.device
            self.batch_size, self.num_heads, _, self.k_head_dim = keys.shape
            self.v_head_dim = values.shape[-1]
            self.keys, self.values = keys, values  # (rows, kv_heads, room, head_dim)
            self.slot = self.cumulative_length = slot
            self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            self.keys.index_copy_(2, self.slot, key_states)
            self.values.index_copy_(2, self.slot, value_states)
            return self.keys, self.values

    return SlotLayer


@dataclass
class Slots:
    """The tensors one bucket's step reads and writes, at fixed addresses (a capture's)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (rows, kv_heads, room, head_dim)
    cache: Any  # a transformers Cache of SlotLayers over `kv`
    slot: torch.Tensor  # (1,) the slot the fed token is written to
    step: torch.Tensor  # (1,) index of the token being chosen
    ids: torch.Tensor  # (rows,) the token each row feeds next
    positions: torch.Tensor  # (rows,) its position (real tokens before it)
    mask: torch.Tensor  # (rows, room) bool: slots a row attends
    uniforms: torch.Tensor  # (rows, room) each row's draw for each step
    tokens: torch.Tensor  # (rows, room) the token chosen at each step
    logps: torch.Tensor  # (rows, room) its log-prob
    first_stop: torch.Tensor  # (rows,) step of the row's first stop id; `room` if none yet
    graphs: dict[Hashable, Any] = field(default_factory=dict)  # sampling -> CUDA graph

    @property
    def shape(self) -> tuple[int, int]:
        return self.mask.shape[0], self.mask.shape[1]


def forward_step(
    model: Any,
    cache: Any,
    ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    keyword: str,
) -> torch.Tensor:
    """One token per row through the model, its key/value written at the cache's slot; the
    part of a step that is compiled. Returns the next logits (rows, vocab). `mask` already lets
    the fed token attend to itself (`StaticDecoder.step`)."""
    return _next_logits(model, cache, ids[:, None], positions[:, None], mask[:, None], keyword)


def _next_logits(
    model: Any,
    cache: Any,
    ids: torch.Tensor,  # (rows, tokens)
    positions: torch.Tensor,  # (rows, tokens)
    mask: torch.Tensor,  # (rows, tokens, room) bool: the slots each token attends
    keyword: str,
) -> torch.Tensor:
    """The model over slots: the logits after each row's last token (rows, vocab)."""
    out = model(
        input_ids=ids,
        attention_mask=mask[:, None],  # 4-D: passed to attention as it is
        position_ids=positions,
        **{keyword: cache},
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[:, -1, :]


def forward_fed(
    model: Any,
    cache: Any,
    ids: torch.Tensor,
    positions: torch.Tensor,
    attention: torch.Tensor,
    span: torch.Tensor,
    keyword: str,
) -> torch.Tensor:
    """The prefill over slots (`StaticDecoder.feed`): each row's fed tokens `ids` (rows,
    width) through the model over a cache of slot layers that write at `span`, the slots
    [total - width, total) (`attention`: (rows, total), each row's real slots, the fed ones
    included). Returns the next logits (rows, vocab).

    A fed token attends to the real slots up to its own, and always to its own (a left pad,
    attending nothing else, stays finite and is masked for every real token); slots past
    `total` are masked. Every size here is symbolic: compiled, one graph serves every call."""
    total, room = attention.shape[1], cache.layers[0].keys.shape[2]
    slots = torch.arange(room, device=ids.device)
    real = F.pad(attention.bool(), (0, room - total))  # (rows, room)
    before = slots[None, :] <= span[:, None]  # (width, room)
    own = slots[None, :] == span[:, None]
    mask = (real[:, None, :] & before) | own  # (rows, width, room)
    return _next_logits(model, cache, ids, positions, mask, keyword)


def sample_step(slots: Slots, logits: torch.Tensor, sampling: Sampling, stop_ids: torch.Tensor):
    """Choose, record and feed back each row's next token, all on the device."""
    u = slots.uniforms.index_select(1, slots.step)[:, 0]
    chosen, logp = choose(logits, sampling, u)
    slots.tokens.index_copy_(1, slots.step, chosen[:, None])
    slots.logps.index_copy_(1, slots.step, logp[:, None].to(slots.logps.dtype))
    stop = (chosen[:, None] == stop_ids).any(-1) & (slots.first_stop == slots.mask.shape[1])
    slots.first_stop.copy_(torch.where(stop, slots.step, slots.first_stop))
    slots.ids.copy_(chosen)
    slots.positions.add_(1)
    slots.slot.add_(1)
    slots.step.add_(1)


def default_compile(fn: Callable) -> Callable:
    """torch.compile for the forward step: one graph, its rows and room symbolic
    (`StaticDecoder.slots` marks them) so that every bucket shares one compilation."""
    return torch.compile(fn, fullgraph=True)


class StaticDecoder:
    """Fixed-shape decoding for one model: the buffers of every bucket, the compiled forward
    and the captured graphs, kept across calls (and across the policies that wrap the same
    module: `decoder_for`).

    `compile`: what compiles `forward_step` (None: run as it is). `capture`: capture each
    bucket's step as a CUDA graph (CUDA only). `fuse`: the step runs each layer's q/k/v and
    gate/up projections as one matrix product each (`coevo.policy.fused`). `prefill`: the
    prefill runs over the bucket's slots too (`feed`: `forward_fed`, compiled as the step is,
    one graph for every call), rather than transformers' forward over a growing cache. Whatever
    fails to compile or capture falls back to running uncompiled or uncaptured, with a
    warning; `fallback` says why.
    """

    def __init__(
        self,
        model: Any,
        *,
        compile: Callable | None = None,
        capture: bool = False,
        fuse: bool = False,
        prefill: bool = False,
    ) -> None:
        self._model = weakref.ref(model)
        self.compile = compile
        self.capture = capture
        self.fused = FusedProjections(model) if fuse else None
        self.prefill = prefill
        self.fallback: str | None = None
        self.captures = 0  # graphs captured so far
        self._forward: Callable | None = None
        self._fed: Callable | None = None
        self._arena: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer, flat
        self._slots: dict[tuple[int, int], Slots] = {}
        self._weights: tuple[int, ...] = ()  # data pointers the graphs were captured with
        self._stops: dict[tuple[int, ...], torch.Tensor] = {}
        self._pool: Any = None

    @property
    def model(self) -> Any:
        model = self._model()
        if model is None:
            raise RuntimeError("The model of this StaticDecoder is gone.")
        return model

    @contextlib.contextmanager
    def stepping(self) -> Iterator[None]:
        """The model as a step runs it: attention over slots (`static_attention`), and the
        fused projections where asked for."""
        fused = self.fused.active() if self.fused is not None else contextlib.nullcontext()
        with static_attention(self.model), fused:
            yield

    def release(self) -> None:
        """Free the buffers and graphs (they come back, captured anew, on the next call)."""
        self._arena, self._slots, self._pool, self._stops = [], {}, None, {}

    def slots(self, rows: int, room: int, layout: KvLayout) -> Slots:
        """The tensors of bucket (rows, room), made on first use. Every bucket's keys and
        values are views of one storage per layer, grown when a bucket needs more."""
        found = self._slots.get((rows, room))
        if found is not None:
            return found
        model = self.model
        dtype = model.dtype
        device = next(model.parameters()).device
        size = rows * layout.kv_heads * room * layout.head_dim
        held = self._arena[0][0] if self._arena else None
        if held is None or held.numel() < size or (held.dtype, held.device) != (dtype, device):
            if held is not None and held.dtype == dtype:
                size = max(size, held.numel() * 3 // 2)  # by half at least: few reallocations
            self.release()  # the old storage (and every capture over it) goes first
            # Zeros: slots a row does not attend must still hold finite numbers (0 * NaN).
            flat = functools.partial(torch.zeros, size, dtype=dtype, device=device)
            self._arena = [(flat(), flat()) for _ in range(layout.layers)]
        shape = (rows, layout.kv_heads, room, layout.head_dim)
        used = math.prod(shape)
        kv = [(k[:used].view(shape), v[:used].view(shape)) for k, v in self._arena]
        slot = torch.zeros(1, dtype=torch.long, device=device)
        from transformers.cache_utils import Cache

        layer = _slot_layer_class()
        logp_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        made = Slots(
            kv=kv,
            cache=Cache(layers=[layer(k, v, slot) for k, v in kv]),
            slot=slot,
            step=torch.zeros(1, dtype=torch.long, device=device),
            ids=torch.zeros(rows, dtype=torch.long, device=device),
            positions=torch.zeros(rows, dtype=torch.long, device=device),
            mask=torch.zeros((rows, room), dtype=torch.bool, device=device),
            uniforms=torch.zeros((rows, room), dtype=torch.float32, device=device),
            tokens=torch.zeros((rows, room), dtype=torch.long, device=device),
            logps=torch.zeros((rows, room), dtype=logp_dtype, device=device),
            first_stop=torch.zeros(rows, dtype=torch.long, device=device),
        )
        # Rows and room vary by bucket, the rest is the model's: one compilation serves all.
        for t in (made.ids, made.positions, made.mask, *(x for pair in kv for x in pair)):
            torch._dynamo.maybe_mark_dynamic(t, 0)
        for t in (made.mask, *(x for pair in kv for x in pair)):
            torch._dynamo.maybe_mark_dynamic(t, t.dim() - 1 if t.dim() == 2 else 2)
        self._slots[(rows, room)] = made
        return made

    def start(
        self,
        slots: Slots,
        logits: torch.Tensor,  # (n, vocab): the prefill's, rows in batch order
        attention: torch.Tensor,  # (n, total) long: each row's real slots
        positions: torch.Tensor,  # (n,) long: each row's next position
        sampling: Sampling,
        uniforms: torch.Tensor | None,  # (n, steps) each row's draws; None when greedy
        stop_ids: tuple[int, ...],
        keyword: str,
    ) -> Decoding:
        """Choose every row's first token from the prefill's logits and make the loop that
        chooses the rest (`Decoding.advance`), the bucket's graph captured if it is not yet."""
        total = attention.shape[1]
        if stop_ids not in self._stops:  # the decoder's own: a graph reads it by address
            self._stops[stop_ids] = torch.tensor(stop_ids, dtype=torch.long, device=logits.device)
        stops = self._stops[stop_ids]

        def reset() -> None:
            n, room = logits.shape[0], slots.shape[1]
            slots.slot.fill_(total)
            slots.step.fill_(1)
            slots.mask.zero_()
            slots.mask[:n, :total] = attention.bool()
            slots.positions.zero_()
            slots.positions[:n] = positions
            slots.uniforms.zero_()
            if uniforms is not None:
                slots.uniforms[:n, : uniforms.shape[1]] = uniforms
            chosen, logp = choose(logits, sampling, None if uniforms is None else uniforms[:, 0])
            slots.ids.zero_()
            slots.ids[:n] = chosen
            slots.tokens[:n, 0] = chosen
            slots.logps[:n, 0] = logp.to(slots.logps.dtype)
            slots.first_stop.fill_(room)
            stop = (chosen[:, None] == stops).any(-1)
            slots.first_stop[:n] = torch.where(stop, 0, room)

        reset()
        if self.fused is not None:
            self.fused.refresh()  # the weights as they are now, where the graphs read them
        graph = None
        if self.capture:
            graph, captured = self._graph(slots, sampling, stops, keyword)
            if captured:
                reset()  # the warm-up steps moved the state on
        return Decoding(self, slots, logits.shape[0], sampling, stops, keyword, graph)

    def feed(
        self,
        slots: Slots,
        ids: torch.Tensor,  # (n, width) each row's fed tokens, right-aligned (left pads)
        positions: torch.Tensor,  # (n, width) their positions (pads: 0)
        attention: torch.Tensor,  # (n, total) each row's real slots, the fed ones included
        keyword: str,
    ) -> torch.Tensor:
        """The prefill of rows [0, n) over the bucket's slots (`forward_fed`), their cached
        tokens already there; returns the next logits (n, vocab).

        At two rows at least (a pad row below) and two tokens (the caller feeds a cached
        token again rather than one alone): torch.compile compiles sizes of 1 apart."""
        n, width = ids.shape
        if width < 2:
            raise ValueError(f"feed runs two tokens a row at least, got {width}.")
        rows = max(n, 2)
        if rows > n:
            below = (0, 0, 0, rows - n)
            ids, positions, attention = (F.pad(t, below) for t in (ids, positions, attention))
        kv = [(k[:rows], v[:rows]) for k, v in slots.kv]
        total = attention.shape[1]
        span = torch.arange(total - width, total, device=ids.device)  # the slots fed
        # Rows, widths, totals and room vary by call: one compilation serves them all.
        for t in (ids, positions, attention, span, *(x for pair in kv for x in pair)):
            torch._dynamo.maybe_mark_dynamic(t, 0)
        for t in (ids, positions, attention):
            torch._dynamo.maybe_mark_dynamic(t, 1)
        for t in (x for pair in kv for x in pair):
            torch._dynamo.maybe_mark_dynamic(t, 2)
        from transformers.cache_utils import Cache

        layer = _slot_layer_class()
        cache = Cache(layers=[layer(k, v, span) for k, v in kv])
        fed = self._forward_fed()(self.model, cache, ids, positions, attention, span, keyword)
        return fed[:n]

    def step(self, slots: Slots, sampling: Sampling, stop_ids: torch.Tensor, keyword: str):
        model = self.model
        # The fed token attends to itself. Outside the compiled part: compiled, the fill's
        # constant became a host tensor copied to the GPU at each call, which a CUDA graph
        # capture refuses (the H200 run of 2026-11-26: `aten.scalar_tensor` at this fill,
        # then "Cannot copy between CPU and CUDA tensors during CUDA graph capture").
        slots.mask.index_fill_(1, slots.slot, True)
        if self.fused is not None:
            self.fused.forget()
        logits = self._forward_step()(
            model, slots.cache, slots.ids, slots.positions, slots.mask, keyword
        )
        sample_step(slots, logits, sampling, stop_ids)

    def _forward_step(self) -> Callable:
        return self._compiled("_forward", forward_step, "the decode step")

    def _forward_fed(self) -> Callable:
        return self._compiled("_fed", forward_fed, "the prefill")

    def _compiled(self, held: str, plain: Callable, what: str) -> Callable:
        """`plain` as the decoder runs it, kept in its attribute `held`: compiled (falling
        back to `plain` on a failure), or as it is where nothing compiles."""
        if getattr(self, held) is None:
            if self.compile is None:
                setattr(self, held, plain)
            else:
                setattr(self, held, _falling_back(self, held, self.compile(plain), plain, what))
        return getattr(self, held)

    def _graph(
        self, slots: Slots, sampling: Sampling, stop_ids: torch.Tensor, keyword: str
    ) -> tuple[Any, bool]:
        """The bucket's CUDA graph for `sampling`, and whether it was captured just now. A
        graph reads the weights where they were at capture: replaced tensors (not an in-place
        update) mean capturing again."""
        model = self.model
        weights = tuple(t.data_ptr() for t in (*model.parameters(), *model.buffers()))
        if self.fused is not None:
            weights += self.fused.pointers()
        if weights != self._weights:
            for each in self._slots.values():
                each.graphs.clear()
            self._weights = weights
        key = (sampling.greedy, sampling.temperature, sampling.top_p, id(stop_ids))
        if key in slots.graphs:
            return slots.graphs[key], False
        try:
            graph = self._capture(slots, sampling, stop_ids, keyword)
        except Exception as first:  # noqa: BLE001 - once more: its warm-up compiles anew
            try:
                graph = self._capture(slots, sampling, stop_ids, keyword)
            except Exception as exc:  # noqa: BLE001 - any failure: decode uncaptured instead
                self.capture = False
                self.fallback = (
                    f"CUDA graph capture failed twice (first: {_reasons(first)}; "
                    f"then: {_reasons(exc, until=first)})"
                )
                warnings.warn(f"{self.fallback}; decoding without graphs.", stacklevel=3)
                return None, True
        slots.graphs[key] = graph
        self.captures += 1
        return graph, True

    def _capture(
        self, slots: Slots, sampling: Sampling, stop_ids: torch.Tensor, keyword: str
    ) -> Any:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        device = slots.ids.device
        # cuDNN attention plans anew for each key length on the host; keep to kernels that
        # are planned once and captured (measured: memory-efficient beat the default).
        backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        # Warm-up off the capture (compilation, autotuning, library handles), on a side
        # stream as capture wants; two steps fit in any bucket (room >= total + 2).
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream), sdpa_kernel(backends):
            for _ in range(2):
                with self.stepping():
                    self.step(slots, sampling, stop_ids, keyword)
        torch.cuda.current_stream(device).wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()  # one pool: graphs never run at once
        graph = torch.cuda.CUDAGraph()
        capturing = torch.cuda.graph(graph, pool=self._pool)
        # Compiling inside a capture fails (it copies constants from the host): a step the
        # warm-up did not compile for raises at once, naming the guard that failed.
        strict = torch._dynamo.config.patch(error_on_recompile=True)
        with sdpa_kernel(backends), self.stepping(), strict, capturing:
            self.step(slots, sampling, stop_ids, keyword)
        return graph


def _reasons(exc: BaseException, until: BaseException | None = None) -> str:
    """An exception and the ones it was raised while handling (a capture that fails inside
    raises again as it ends), back to `until`: each's type and first line, innermost first."""
    chain: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and seen is not until and len(chain) < 3:
        first_line = (str(seen).strip().splitlines() or [""])[0]
        chain.append(f"{type(seen).__name__}: {first_line}")
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return " <- ".join(reversed(chain))


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _falling_back(
    decoder: StaticDecoder, held: str, compiled: Callable, plain: Callable, what: str
) -> Callable:
    """`compiled`, or `plain` from its first failure on, when it becomes the decoder's `held`
    (compiling happens on the first call, before anything runs, so the state is untouched).

    The step (and the prefill) compiles once for every bucket (`default_compile`), so a later
    call that would compile again is a failure too: a guard that fails at every call (the H100
    run of 2026-11-26: a forward hook's Python counter) would otherwise compile anew at each
    step, tens of seconds each on a GPU, until dynamo's recompile limit."""
    compiled_once = False

    def run(*args: Any) -> Any:
        nonlocal compiled_once
        if getattr(decoder, held) is plain:
            return plain(*args)
        strict = (
            torch._dynamo.config.patch(error_on_recompile=True)
            if compiled_once
            else contextlib.nullcontext()
        )
        try:
            with strict:
                out = compiled(*args)
        except Exception as exc:  # noqa: BLE001 - a compiler failure: decode uncompiled
            if _capturing():  # the capture's failure, not the compiler's: `_graph` decides
                raise
            setattr(decoder, held, plain)
            decoder.fallback = f"compiling {what} failed ({type(exc).__name__}: {exc})"
            warnings.warn(f"{decoder.fallback}; running it uncompiled.", stacklevel=2)
            return plain(*args)
        compiled_once = True
        return out

    return run


class Decoding:
    """One call's loop over a bucket: `advance` chooses tokens up to an index on the device;
    the rest reads what the host needs, rows [0, n) only (the others are pads)."""

    def __init__(
        self,
        decoder: StaticDecoder,
        slots: Slots,
        n: int,
        sampling: Sampling,
        stop_ids: torch.Tensor,
        keyword: str,
        graph: Any,
    ) -> None:
        self.decoder, self.slots, self.n = decoder, slots, n
        self.sampling, self.stop_ids, self.keyword, self.graph = sampling, stop_ids, keyword, graph
        self.chosen = 1  # tokens chosen so far per row (the first by `start`)

    def advance(self, upto: int) -> None:
        """Choose tokens until `upto` per row; nothing here waits for the device."""
        steps = upto - self.chosen
        if steps <= 0:
            return
        if self.graph is not None:
            for _ in range(steps):
                self.graph.replay()
        else:
            with self.decoder.stepping():
                for _ in range(steps):
                    self.decoder.step(self.slots, self.sampling, self.stop_ids, self.keyword)
        self.chosen = upto

    def first_stops(self) -> list[int]:
        """Each row's first step that chose a stop id (`room` where none did)."""
        return self.slots.first_stop[: self.n].tolist()

    def tokens(self, lo: int, hi: int) -> list[list[int]]:
        return self.slots.tokens[: self.n, lo:hi].tolist()

    def logprobs(self, hi: int) -> list[list[float]]:
        return self.slots.logps[: self.n, :hi].tolist()


_DECODERS: weakref.WeakKeyDictionary[Any, dict[str, StaticDecoder]] = weakref.WeakKeyDictionary()


def decoder_for(model: Any, mode: str) -> StaticDecoder:
    """The `mode` ("static" or "graphs") decoder of `model`, shared by every policy that plays
    this module: a stage that wraps the module anew reuses its compilation and captures."""
    held = _DECODERS.setdefault(model, {})
    if mode not in held:
        on_cuda = next(model.parameters()).device.type == "cuda"
        if mode == "graphs":
            held[mode] = StaticDecoder(model, compile=default_compile, capture=on_cuda)
        else:
            held[mode] = StaticDecoder(model)
    return held[mode]
