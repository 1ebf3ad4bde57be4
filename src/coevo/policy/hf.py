"""A Hugging Face causal LM from a local path as a Policy: batched, left-padded generation.

The decoding loop is written here rather than delegated to `model.generate` because rollouts
need three things it does not give together: rows that finish (end-of-turn token or a stop
string such as "\\nObservation:") leave the batch and stop costing compute, each row can have
its own seed so a sample does not depend on its batch neighbours, and the log-prob of every
generated token under the model comes for free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from coevo.policy.base import Completion, PolicyError, Sampling
from coevo.policy.render import RenderError, check_chat_template, end_of_turn_ids

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


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


def check_model_dir(path: Path | str, what: str = "model") -> Path:
    """Return `path` if it holds a saved Hugging Face checkpoint, else raise a clear error."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise PolicyError(
            f"{str(path)!r} holds no {what} (no config.json): pass a directory saved with "
            "save_pretrained, e.g. one made by `coevo model init --env NAME --out DIR`."
        )
    return path


class HFPolicy:
    """A causal LM (and optional PEFT LoRA adapter) loaded from local directories."""

    def __init__(
        self,
        path: Path | str,
        *,
        adapter: Path | str | None = None,
        dtype: str | torch.dtype = "auto",
        device: str = "auto",
        name: str | None = None,
        merge_adapter: bool = True,
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
        model = AutoModelForCausalLM.from_pretrained(self.path, dtype=self.dtype)
        if adapter is not None:
            model = self._with_adapter(model, Path(adapter), merge_adapter)
        self.model = model.to(self.device).eval()
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0  # padded slots are masked anyway
        stop = set(end_of_turn_ids(self.tokenizer))
        eos = model.generation_config.eos_token_id
        stop.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.stop_ids = torch.tensor(sorted(stop), dtype=torch.long, device=self.device)

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
    ) -> list[Completion]:
        """One completion per prompt (token ids from `render_prompt` with `self.tokenizer`)."""
        from transformers import DynamicCache

        n = len(prompts)
        if n == 0:
            return []
        if seeds is not None and len(seeds) != n:
            raise ValueError(f"seeds must give one seed per prompt: {len(seeds)} for {n}.")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("Every prompt needs at least one token; build it with render_prompt.")
        generators = self._generators(n, sampling, seeds)
        width = max(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)  # (batch, seq), left-padded
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
            attention[i, width - len(prompt) :] = 1
        ids, attention = ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # (batch, seq)
        cache = DynamicCache()
        logits = self.model(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]  # (batch, vocab)
        next_position = positions[:, -1:] + 1  # (batch, 1)

        rows = list(range(n))  # batch row -> prompt index, shrinking as rows finish
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        finish: list[str] = ["length"] * n
        window = max((len(s) for s in sampling.stop), default=0) + 2
        for step in range(sampling.max_new_tokens):
            chosen, chosen_logp = self._choose(logits, sampling, [generators[r] for r in rows])
            done_rows: list[int] = []
            chosen_list = chosen.tolist()
            is_stop_id = torch.isin(chosen, self.stop_ids).tolist()
            for b, r in enumerate(rows):
                tokens[r].append(chosen_list[b])
                if is_stop_id[b]:
                    finish[r] = "stop"
                    done_rows.append(b)
            if sampling.logprobs:
                for b, value in enumerate(chosen_logp.tolist()):
                    logps[rows[b]].append(value)
            if sampling.stop:
                self._check_stop_strings(rows, tokens, window, sampling.stop, finish, done_rows)
            if step == sampling.max_new_tokens - 1:
                break
            if done_rows:
                keep = [b for b in range(len(rows)) if b not in set(done_rows)]
                if not keep:
                    break
                index = torch.tensor(keep, dtype=torch.long, device=self.device)
                cache.batch_select_indices(index)
                attention, next_position = attention[index], next_position[index]
                chosen = chosen[index]
                rows = [rows[b] for b in keep]
            attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
            logits = self.model(
                input_ids=chosen[:, None],
                attention_mask=attention,
                position_ids=next_position,
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1, :]  # (rows, vocab)
            next_position = next_position + 1
        return [self._completion(tokens[i], logps[i], finish[i], sampling) for i in range(n)]

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

    @staticmethod
    def _choose(
        logits: torch.Tensor, sampling: Sampling, generators: list[torch.Generator | None]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token per row and its log-prob under the unmodified model distribution."""
        logits = logits.float()  # (rows, vocab)
        if sampling.greedy:
            chosen = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / sampling.temperature, dim=-1)
            if sampling.top_p < 1.0:
                sorted_probs, order = probs.sort(dim=-1, descending=True)
                # Drop a token when the tokens ranked above it already reach top_p.
                drop = sorted_probs.cumsum(-1) - sorted_probs >= sampling.top_p
                sorted_probs = sorted_probs.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
            if all(g is generators[0] for g in generators):
                chosen = torch.multinomial(probs, 1, generator=generators[0])[:, 0]
            else:
                chosen = torch.cat(
                    [
                        torch.multinomial(p, 1, generator=g)
                        for p, g in zip(probs, generators, strict=True)
                    ]
                )
        logp = torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None])[:, 0]
        return chosen, logp  # (rows,), (rows,)

    def _check_stop_strings(
        self,
        rows: list[int],
        tokens: list[list[int]],
        window: int,
        stop: tuple[str, ...],
        finish: list[str],
        done_rows: list[int],
    ) -> None:
        candidates = [b for b in range(len(rows)) if b not in set(done_rows)]
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

    def _completion(
        self, tokens: list[int], logps: list[float], finish: str, sampling: Sampling
    ) -> Completion:
        text = self._decode_many([tokens])[0]  # special tokens (end of turn) are not text
        cut = min((i for i in (text.find(s) for s in sampling.stop) if i >= 0), default=-1)
        if cut >= 0:
            text = text[:cut]
        return Completion(
            text=text,
            finish_reason="stop" if finish == "stop" else "length",
            token_ids=tuple(tokens) if sampling.logprobs else None,
            logprobs=tuple(logps) if sampling.logprobs else None,
        )
