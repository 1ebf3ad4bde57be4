"""A Hugging Face causal LM from a local path as a Policy: batched, left-padded generation.

The decoding loop is written here rather than delegated to `model.generate` because rollouts
need three things it does not give together: rows that finish (end-of-turn token or a stop
string such as "\\nObservation:") leave the batch and stop costing compute, each row can have
its own seed so a sample does not depend on its batch neighbours, and the log-prob of every
generated token under the model comes for free. With `sessions`, an episode's key/value cache
outlives the call, so the next step of a rollout runs the model on the new tokens only.

With `decode="graphs"` the same loop runs over fixed shapes (`coevo.policy.static_decode`):
finished rows stay in the batch, masked, so that a step can be compiled and replayed as a CUDA
graph, and the host looks at the tokens every `sync_every` steps rather than at each one. `auto`
is that on CUDA (checked by tests/test_gpu.py and measured on an H100: 3.4 ms per decode step
against 24.5 eager, docs/models.md) and the eager loop elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from coevo.attention import sdpa_backends, use_packed_attention
from coevo.lengths import common_prefix, length_groups
from coevo.policy.base import Completion, PolicyError, Sampling, cut_at_stop
from coevo.policy.cache import (
    Block,
    Session,
    cache_keyword,
    cache_over,
    fill_prefixes,
    kv_layout,
    new_cache,
    prefix_buffers,
)
from coevo.policy.sample import choose, draws
from coevo.policy.static_decode import (
    MODES,
    Decoding,
    Slots,
    decoder_for,
    room_bucket,
    rows_bucket,
    serves,
)
from coevo.render import RenderError, check_chat_template, end_of_turn_ids

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

Generators = list[torch.Generator | None]  # one per prompt, None when greedy
Keys = Sequence[Hashable] | None  # one session key per prompt


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        # bf16 where the hardware has it; CPU float32 keeps tiny-model runs exact and fast.
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in DTYPES:
        raise PolicyError(f"Unknown dtype {dtype!r}: use auto or one of {', '.join(DTYPES)}.")
    return DTYPES[dtype]


def resolve_decode(decode: str, device: torch.device) -> str:
    """The decoding loop `decode` names (see `static_decode.MODES`); `auto` takes the
    COEVO_DECODE environment variable when it is set (e.g. `eager` turns capture off)."""
    if decode == "auto":
        decode = os.environ.get("COEVO_DECODE", "auto") or "auto"
    if decode not in MODES:
        raise PolicyError(
            f"Unknown decode {decode!r} (argument or COEVO_DECODE): use one of {', '.join(MODES)}."
        )
    if decode == "auto":
        # On CUDA a small model's decode step waits on kernel launches, which a replayed graph
        # saves (issue 37: 7x fewer ms per step on an H100); the process compiles the step
        # once (about 45 s there), every later model of the same shape reuses it. On the CPU
        # the compiled step saves little and the eager loop needs no compiler.
        return "graphs" if device.type == "cuda" else "eager"
    return decode


def check_model_dir(path: Path | str, what: str = "model") -> Path:
    """Return `path` if it holds a saved Hugging Face checkpoint, else raise a clear error."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise PolicyError(
            f"{str(path)!r} holds no {what} (no config.json): pass a directory saved with "
            "save_pretrained, e.g. one made by `coevo model init --env NAME --out DIR`."
        )
    return path


def right_aligned(lengths: list[int], width: int) -> torch.Tensor:
    """(rows, width) long: 1 on each row's last `lengths[row]` columns, 0 before them."""
    return (torch.arange(width) >= width - torch.tensor(lengths)[:, None]).long()


class HFPolicy:
    """A causal LM (and optional PEFT LoRA adapter) loaded from local directories.

    `model`: the checkpoint at `path` already in memory (e.g. just trained), played as it is,
    without loading it again, when it has the policy's dtype; it is moved to the policy's
    device and put in eval mode, and never cast. The tokenizer always comes from `path`.

    `decode`: `eager`, `static`, `graphs` or `auto` (`static_decode.MODES`; `auto`: graphs on
    CUDA, eager elsewhere, unless COEVO_DECODE says otherwise).
    The fixed-shape loops serve models on SDPA whose every layer is full attention, the eager
    loop the others. `sync_every`: tokens the fixed-shape loops choose between looks by the host.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        model: Any = None,
        adapter: Path | str | None = None,
        dtype: str | torch.dtype = "auto",
        device: str = "auto",
        name: str | None = None,
        merge_adapter: bool = True,
        max_sessions: int = 1024,
        decode: str = "auto",
        sync_every: int = 8,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = check_model_dir(path)
        self.name = name or self.path.name
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        try:
            check_chat_template(self.tokenizer)
        except RenderError as exc:
            raise PolicyError(str(exc)) from None
        if model is None or adapter is not None or model.dtype != self.dtype:
            # (A module of another dtype is left as it is for its trainer: casting it here
            # would cost that trainer its precision.)
            model = AutoModelForCausalLM.from_pretrained(self.path, dtype=self.dtype)
        if adapter is not None:
            model = self._with_adapter(model, Path(adapter), merge_adapter)
        self.model = model.to(self.device).eval()
        # A prefill over a cache must not copy the cache per query head (exact either way).
        use_packed_attention(self.model)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0  # padded slots are masked anyway
        stop = set(end_of_turn_ids(self.tokenizer))
        eos = model.generation_config.eos_token_id
        stop.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.stop_ids = torch.tensor(sorted(stop), dtype=torch.long, device=self.device)
        self._stop_tuple = tuple(sorted(stop))
        self.max_sessions = max_sessions
        self._sessions: dict[Hashable, Session] = {}
        self._layout = kv_layout(self.model.config)
        self._cache_keyword = cache_keyword(self.model)
        # Prefill groups: on a CPU a pad costs what a token costs; on a GPU padding is
        # nearly free next to another forward's launches, so all rows go in one.
        self.prefill_waste = 0.1 if self.device.type == "cpu" else float("inf")
        self.decode = resolve_decode(decode, self.device)
        if sync_every < 1:
            raise ValueError(f"sync_every must be at least 1, got {sync_every}.")
        self.sync_every = sync_every
        # Shared by the policies that wrap this module: its compilation and captures too.
        static = self.decode != "eager" and self._layout is not None and serves(self.model)
        self.decoder = decoder_for(self.model, self.decode) if static else None

    @staticmethod
    def _with_adapter(model: Any, adapter: Path, merge: bool) -> Any:
        from peft import PeftModel

        if not (adapter / "adapter_config.json").is_file():
            raise PolicyError(
                f"{str(adapter)!r} holds no LoRA adapter (no adapter_config.json): pass a "
                "directory saved by a PEFT model's save_pretrained."
            )
        model = PeftModel.from_pretrained(model, adapter)
        # Merged weights decode as fast as the base model; keep the adapter for training.
        return model.merge_and_unload() if merge else model

    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: Sampling,
        *,
        seeds: Sequence[int] | None = None,
        sessions: Sequence[Hashable] | None = None,
    ) -> list[Completion]:
        """One completion per prompt (token ids from `render_prompt` with `self.tokenizer`).

        `sessions` (one key per prompt, e.g. an episode) keep each row's key/value cache after
        the call: a later prompt under the same key that extends the tokens already seen
        (the previous prompt, then the new turns) only runs the model on the new tokens.
        Call `end_sessions` when an episode is over.
        """
        n = len(prompts)
        if n == 0:
            return []
        for what, values in (("seeds", seeds), ("sessions", sessions)):
            if values is not None and len(values) != n:
                raise ValueError(f"{what} must give one per prompt: {len(values)} for {n}.")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("Every prompt needs at least one token; build it with render_prompt.")
        prompts = [list(p) for p in prompts]
        generators = self._generators(n, sampling, seeds)
        with sdpa_backends(self.device):  # never cuDNN's on CUDA: it plans every new length
            if self.decoder is not None and self._layout is not None:
                return self._generate_static(prompts, sampling, generators, sessions)
            return self._generate_eager(prompts, sampling, generators, sessions)

    def _generate_eager(
        self, prompts: list[list[int]], sampling: Sampling, generators: Generators, sessions: Keys
    ) -> list[Completion]:
        """`generate` one step at a time, dropping finished rows as it goes."""
        n = len(prompts)
        cache, attention, logits, order = self._prefill(prompts, sessions, sampling.max_new_tokens)
        next_position = torch.tensor([[len(prompts[i])] for i in order], device=self.device)
        # Each batch row's uniform for every step, drawn before the loop as the fixed-shape
        # loop draws them: the same seed gives the same reply on either path.
        uniforms = draws([generators[i] for i in order], sampling.max_new_tokens, self.device)

        # Batch row -> prompt index, None once finished. Dropping rows copies the whole cache,
        # so finished rows are only pruned once they are a quarter of the batch.
        rows: list[int | None] = list(order)
        viewing: list[Hashable] = []  # sessions kept since the last prune: views of `cache`
        live = n
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        finish: list[str] = ["length"] * n
        window = max((len(s) for s in sampling.stop), default=0) + 2
        for step in range(sampling.max_new_tokens):
            u = None if uniforms is None else uniforms[:, step]
            chosen, chosen_logp = choose(logits, sampling, u)
            done: list[int] = []
            chosen_list, logp_list = chosen.tolist(), chosen_logp.tolist()
            is_stop_id = torch.isin(chosen, self.stop_ids).tolist()
            for b, r in enumerate(rows):
                if r is None:
                    continue
                tokens[r].append(chosen_list[b])
                logps[r].append(logp_list[b])
                if is_stop_id[b]:
                    finish[r] = "stop"
                    done.append(b)
            if sampling.stop:
                self._check_stop_strings(rows, tokens, window, sampling.stop, finish, done)
            if step == sampling.max_new_tokens - 1:
                done = [b for b, r in enumerate(rows) if r is not None]
            for b in done:
                r = rows[b]
                if sessions is not None:
                    # The last chosen token was never fed to the model: the cache stops before it.
                    ids = prompts[r] + tokens[r][:-1]
                    self._keep_session(sessions[r], ids, cache, b)
                    viewing.append(sessions[r])
                rows[b] = None
            live -= len(done)
            if live == 0:
                break
            if (len(rows) - live) * 4 >= len(rows):
                keep = [b for b, r in enumerate(rows) if r is not None]
                index = torch.tensor(keep, dtype=torch.long, device=self.device)
                # The dropped rows' sessions get their own copies (their size, not the
                # batch's), so the cache from before the prune is freed right away.
                self._own_sessions(viewing)
                viewing.clear()
                cache.batch_select_indices(index)
                attention, next_position = attention[index], next_position[index]
                uniforms = None if uniforms is None else uniforms[index]
                chosen = chosen[index]
                rows = [rows[b] for b in keep]
            attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
            logits = self.model(
                input_ids=chosen[:, None],
                attention_mask=attention,
                position_ids=next_position,
                **{self._cache_keyword: cache},
                use_cache=True,
            ).logits[:, -1, :]  # (rows, vocab)
            next_position = next_position + 1
        return self._completions(tokens, logps, finish, sampling)

    def _generate_static(
        self, prompts: list[list[int]], sampling: Sampling, generators: Generators, sessions: Keys
    ) -> list[Completion]:
        """`generate` over fixed shapes (`static_decode`): the eager loop's tokens and
        log-probs, its stop ids found on the device, its stop strings every `sync_every`
        tokens (tokens after a row's stop are dropped), its sessions kept as copies."""
        n, steps = len(prompts), sampling.max_new_tokens
        total = max(len(p) for p in prompts)
        slots = self.decoder.slots(rows_bucket(n), room_bucket(total + steps + 1), self._layout)
        _, attention, logits, order = self._prefill(prompts, sessions, steps, slots=slots)
        run = self.decoder.start(
            slots,
            logits,
            attention,
            torch.tensor([len(prompts[i]) for i in order], device=self.device),
            sampling,
            draws([generators[i] for i in order], steps, self.device),
            self._stop_tuple,
            self._cache_keyword,
        )
        ends: list[int | None] = [None] * n  # batch row -> index of its last token, once known
        seen: list[list[int]] = [[] for _ in range(n)]  # tokens read so far, for stop strings
        done = 0
        while done < steps and None in ends:
            upto = min(done + self.sync_every, steps)
            run.advance(upto)
            stops = run.first_stops()  # the host waits for the device here only
            if sampling.stop:
                for row, block in zip(seen, run.tokens(done, upto), strict=True):
                    row.extend(block)
                self._find_stop_strings(seen, ends, stops, done, upto, sampling.stop)
            for b, at in enumerate(stops):
                if ends[b] is None and at < upto:
                    ends[b] = at
            done = upto
        tokens, logps = run.tokens(0, done), run.logprobs(done)
        lasts = [steps - 1 if end is None else end for end in ends]
        row = {i: b for b, i in enumerate(order)}  # prompt index -> batch row
        out = self._completions(
            [tokens[row[i]][: lasts[row[i]] + 1] for i in range(n)],
            [logps[row[i]][: lasts[row[i]] + 1] for i in range(n)],
            ["length" if ends[row[i]] is None else "stop" for i in range(n)],
            sampling,
        )
        if sessions is not None:
            self._keep_static_sessions(run, prompts, order, tokens, lasts, sessions, total)
        return out

    def _find_stop_strings(
        self,
        seen: list[list[int]],
        ends: list[int | None],
        stops: list[int],
        lo: int,
        hi: int,
        stop: tuple[str, ...],
    ) -> None:
        """Set `ends[b]` to the first token in [lo, hi) (before the row's first stop id) whose
        tail holds a stop string: where the eager loop checks, one decode per token. Only the
        rows whose whole block (with the window before it) holds one are asked token by token:
        a stop string in a token's tail is in the block's text, which holds every such tail."""
        window = max(len(s) for s in stop) + 2
        rows = [b for b, end in enumerate(ends) if end is None and lo < min(hi, stops[b])]
        blocks = self._decode_many(
            [seen[b][max(lo + 1 - window, 0) : min(hi, stops[b])] for b in rows]
        )
        asks = [
            (b, j)
            for b, block in zip(rows, blocks, strict=True)
            if any(s in block for s in stop)
            for j in range(lo, min(hi, stops[b]))
        ]
        tails = self._decode_many([seen[b][max(j + 1 - window, 0) : j + 1] for b, j in asks])
        for (b, j), tail in zip(asks, tails, strict=True):
            if ends[b] is None and any(s in tail for s in stop):
                ends[b] = j

    def _keep_static_sessions(
        self,
        run: Decoding,
        prompts: list[list[int]],
        order: list[int],
        tokens: list[list[int]],
        lasts: list[int],
        sessions: Sequence[Hashable],
        total: int,
    ) -> None:
        # The buffers serve the next call: copy the slots the rows used, one copy per layer
        # (on a GPU a copy per row and layer would be thousands of launches), and let each
        # session view its row of it. The last token never ran: the cache stops before it.
        lo = total - max(len(p) for p in prompts)
        hi = total + max(lasts)
        n = len(order)
        copies: Block = [
            (k[:n, :, lo:hi].clone(), v[:n, :, lo:hi].clone()) for k, v in run.slots.kv
        ]
        for b in sorted(range(n), key=lambda b: lasts[b]):  # in the order rows finished
            i = order[b]
            ids = prompts[i] + tokens[b][: lasts[b]]
            self._remember(sessions[i], Session(ids, copies, b, total - len(prompts[i]) - lo))

    def _prefill(
        self,
        prompts: list[list[int]],
        sessions: Sequence[Hashable] | None,
        max_new_tokens: int,
        slots: Slots | None = None,
    ) -> tuple[Any, torch.Tensor, torch.Tensor, list[int]]:
        """Run the prompts' uncached tokens; returns the cache, attention mask, next logits
        and the batch's row order (batch row -> prompt index). With `slots` (a fixed-shape
        bucket: rows >= n, room >= total + max_new_tokens + 1), the keys and values go into
        its first rows instead of new buffers; where its decoder runs the prefill itself
        (`StaticDecoder(prefill=True)`), all rows at once, two tokens a row at least.

        Rows are fed in groups of like uncached length (`length_groups`: a long page beside
        a one-line error message need not share a width), every row of a group its group's
        longest uncached part, so a row whose part is shorter runs a few cached tokens again
        instead of pads. Each row's real tokens are then contiguous and right-aligned in one
        cache, [pad | cached | fed], whichever group fed it: decoding goes on over the whole
        batch, and `_keep_session` keeps a view rather than a copy. Positions count real
        tokens only, as they would unbatched.
        """
        n = len(prompts)
        # Taken out of the sessions: every row is kept again when it finishes, as a view of
        # the new cache, and meanwhile the old caches go as soon as they are copied
        # (`prefix_buffers`) rather than beside the new ones. (A call cut off by an error
        # leaves its rows no session: a next call runs their whole prompts, as for new rows.)
        entries = [self._sessions.pop(k, None) for k in sessions] if sessions else [None] * n
        reuse = [  # the last token must run: its logits
            min(common_prefix(entry.ids, prompt), len(prompt) - 1) if entry is not None else 0
            for entry, prompt in zip(entries, prompts, strict=True)
        ]
        uncached = [len(p) - r for p, r in zip(prompts, reuse, strict=True)]
        total = max(len(p) for p in prompts)  # slots every row's real tokens end at
        # The decoder's prefill feeds two tokens a row at least (`feed`): a cached one again,
        # or a pad in the row's pad slots; prompts of one token all go transformers' way.
        fed_by_decoder = (
            slots is not None and self.decoder is not None and self.decoder.prefill and total > 1
        )
        if fed_by_decoder:
            uncached = [max(u, 2) for u in uncached]
        groups = (
            length_groups(uncached, self.prefill_waste)
            if self._layout is not None and not fed_by_decoder
            else [list(range(n))]
        )
        order = [i for rows in groups for i in rows]
        fed = {i: max(uncached[j] for j in rows) for rows in groups for i in rows}
        # Cached tokens kept: at most `reuse`, by the choice of each group's width.
        cached = [max(len(prompts[i]) - fed[i], 0) for i in order]
        prefixes = [
            entries[i].prefix(c) if c else None  # type: ignore[union-attr]
            for i, c in zip(order, cached, strict=True)
        ]
        # The blocks no session left in `_sessions` shares are this call's to free as it copies.
        kept = {id(entry.block) for entry in self._sessions.values()}
        free = frozenset(id(p.block) for p in prefixes if p is not None) - kept
        del entries  # the prefixes are now the only hold on the old caches
        reserve = max_new_tokens + 1
        ends = [total - fed[i] for i in order]
        if self._layout is None:
            width = fed[order[0]]
            cache = new_cache(self.model.config, prefixes, width=total - width, free=free)
            logits = self._feed([prompts[i] for i in order], cached, width, total, cache)
        else:
            if slots is None:
                buffers = prefix_buffers(
                    self._layout,
                    prefixes,
                    ends,
                    total + reserve,
                    dtype=self.model.dtype,
                    device=self.device,
                    free=free,
                )
            else:
                buffers = [(k[:n], v[:n]) for k, v in slots.kv]
                fill_prefixes(buffers, prefixes, ends, free)
            if fed_by_decoder:  # one group, fed over the slots: they are the cache
                batch = [prompts[i] for i in order]
                inputs = self._fed_inputs(batch, cached, fed[order[0]], total)
                logits = self.decoder.feed(slots, *inputs, self._cache_keyword)
                cache = None
            else:
                parts, start = [], 0
                for rows in groups:
                    stop = start + len(rows)
                    width = fed[rows[0]]
                    # This group's rows of the buffers: the model writes their keys/values.
                    part = cache_over(
                        self.model.config,
                        [(k[start:stop], v[start:stop]) for k, v in buffers],
                        total - width,
                        reserve=0,
                    )
                    batch = [prompts[i] for i in rows]
                    parts.append(self._feed(batch, cached[start:stop], width, total, part))
                    start = stop
                cache = cache_over(self.model.config, buffers, total, reserve)
                logits = torch.cat(parts)
        attention = right_aligned([len(prompts[i]) for i in order], total)  # (batch, slots)
        return cache, attention.to(self.device), logits, order

    def _fed_inputs(
        self, prompts: list[list[int]], cached: list[int], width: int, total: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ids (rows, width) of each prompt's tokens after its first `cached` (its last
        `width` at most, right-aligned), their positions, and each row's real slots
        (rows, total), on the device."""
        # Built whole rather than row by row: on a GPU's host every small op is a cost.
        parts = [prompt[c:] for prompt, c in zip(prompts, cached, strict=True)]
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in parts])  # (rows, fed)
        fed = right_aligned([len(p) for p in parts], width)
        # A fed token's position: its index in its prompt (pads: 0).
        first = torch.tensor([c - width + len(p) for p, c in zip(parts, cached, strict=True)])
        positions = (torch.arange(width) + first[:, None]) * fed
        attention = right_aligned([len(p) for p in prompts], total)  # (rows, slots)
        return ids.to(self.device), positions.to(self.device), attention.to(self.device)

    def _feed(
        self, prompts: list[list[int]], cached: list[int], width: int, total: int, cache: Any
    ) -> torch.Tensor:
        """Run each prompt's tokens after its first `cached` (its last `width` at most,
        right-aligned) on a cache holding the cached ones; returns the next logits."""
        ids, positions, attention = self._fed_inputs(prompts, cached, width, total)
        return self.model(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            **{self._cache_keyword: cache},
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]  # (rows, vocab)

    def _keep_session(self, key: Hashable, ids: list[int], cache: Any, row: int) -> None:
        # The row's real tokens are the last len(ids) slots of the cache (see _prefill).
        start = cache.layers[0].keys.shape[-2] - len(ids)
        block: Block = [(layer.keys, layer.values) for layer in cache.layers]
        self._remember(key, Session(ids, block, row, start))

    def _remember(self, key: Hashable, session: Session) -> None:
        self._sessions.pop(key, None)
        self._sessions[key] = session
        while len(self._sessions) > self.max_sessions:  # forgotten sessions: drop the oldest
            self._sessions.pop(next(iter(self._sessions)))

    def _own_sessions(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            entry = self._sessions.get(key)
            if entry is not None:
                self._sessions[key] = entry.owned()

    def end_sessions(self, keys: Iterable[Hashable]) -> None:
        """Free the caches kept for `keys` (episodes that are over)."""
        for key in keys:
            self._sessions.pop(key, None)

    def _generators(
        self, n: int, sampling: Sampling, seeds: Sequence[int] | None
    ) -> list[torch.Generator | None]:
        if sampling.greedy:
            return [None] * n
        if seeds is not None:
            return [torch.Generator(self.device).manual_seed(int(s)) for s in seeds]
        shared = torch.Generator(self.device)
        if sampling.seed is not None:
            shared.manual_seed(sampling.seed)
        else:
            shared.seed()
        return [shared] * n

    def _check_stop_strings(
        self,
        rows: list[int | None],
        tokens: list[list[int]],
        window: int,
        stop: tuple[str, ...],
        finish: list[str],
        done_rows: list[int],
    ) -> None:
        finished = set(done_rows)
        candidates = [b for b, r in enumerate(rows) if r is not None and b not in finished]
        if not candidates:
            return
        # One batched decode of each live row's last few tokens: enough to hold any stop string.
        tails = self._decode_many([tokens[rows[b]][-window:] for b in candidates])
        for b, tail in zip(candidates, tails, strict=True):
            if any(s in tail for s in stop):
                finish[rows[b]] = "stop"
                done_rows.append(b)

    def _decode_many(self, sequences: list[list[int]]) -> list[str]:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            return backend.decode_batch(sequences, skip_special_tokens=True)
        return self.tokenizer.batch_decode(sequences, skip_special_tokens=True)

    def _completions(
        self,
        tokens: list[list[int]],
        logps: list[list[float]],
        finish: list[str],
        sampling: Sampling,
    ) -> list[Completion]:
        """Each row's completion, every text decoded in one call (special tokens such as the
        end of turn are not text)."""
        texts = self._decode_many(tokens)
        return [
            Completion(
                text=cut_at_stop(text, sampling.stop),
                finish_reason="stop" if why == "stop" else "length",
                token_ids=tuple(ids) if sampling.logprobs else None,
                logprobs=tuple(lp) if sampling.logprobs else None,
            )
            for text, ids, lp, why in zip(texts, tokens, logps, finish, strict=True)
        ]
