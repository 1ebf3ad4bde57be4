"""The trainable model: LoRA wrapping, the agent-token log-prob forward, the merged save.

`AgentLogps` is the module the loops hand to `accelerator.prepare`: its forward runs the
decoder, keeps the hidden states of the positions that predict agent tokens and applies the
LM head to those rows only. Observations are most of a multi-turn trajectory, so this skips
most of the (tokens, vocab) logits a plain forward would build, in time and in memory. Rows of
unlike length go through in groups of like length (`length_groups`), so few pads are computed.
Preference pairs can instead go through as forks (`coevo.train.batches.collate_forked`): the
prefix a pair's two sides share is computed once; SFT batches as one packed row
(`coevo.train.batches.collate_packed`): no pads at all. The LM head's logits are computed
`LOGIT_CHUNK` rows at a time (`coevo.train.losses.head_logps`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.utils.checkpoint
from torch import nn

from coevo.attention import PackedSeqs, PairForks, fork_mask, use_packed_attention
from coevo.lengths import length_groups
from coevo.train.losses import head_logps, sequence_logps, token_logps
from coevo.train.settings import Compute, Lora

T = TypeVar("T")

# Config fields that make the LM head more than a linear layer; such models take the plain path.
_HEAD_EXTRAS = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")

LOGIT_CHUNK = 1024
"""Rows of LM-head logits computed at a time in training: 200 MB of float32 logits at
SmolLM2's 49k vocabulary, where a whole batch's agent tokens would take gigabytes."""


def load_model(model: Any) -> nn.Module:
    """A causal LM from a model object or a local directory."""
    if isinstance(model, str | Path):
        from transformers import AutoModelForCausalLM

        path = Path(model)
        if not path.exists():
            raise FileNotFoundError(
                f"Model directory {str(path)!r} does not exist; run `coevo model init` or give "
                "the path of a saved checkpoint."
            )
        return AutoModelForCausalLM.from_pretrained(path)
    return model


def add_lora(
    model: nn.Module,
    *,
    r: int,
    alpha: int,
    dropout: float,
    target_modules: tuple[str, ...],
    layers: list[int] | None = None,
) -> nn.Module:
    """Wrap `model` in fresh LoRA adapters (PEFT); only the adapters stay trainable.

    `layers`: decoder layer indices that get adapters (None: all of them).
    """
    from peft import LoraConfig, get_peft_model

    names = list(target_modules)
    targets: str | list[str] = "all-linear" if names == ["all-linear"] else names
    try:
        return get_peft_model(
            model,
            LoraConfig(
                r=r,
                lora_alpha=alpha,
                lora_dropout=dropout,
                target_modules=targets,
                layers_to_transform=layers,
                task_type="CAUSAL_LM",
            ),
        )
    except ValueError as e:
        raise ValueError(
            f"LoRA target modules {names} do not match this model ({e}); set "
            "lora.target_modules to names of its linear layers, e.g. ['q_proj', 'v_proj']."
        ) from None


def trainable(model: Any, compute: Compute, lora: Lora) -> nn.Module:
    """The model to train, as the settings ask: loaded, checkpointed, LoRA-wrapped, with only
    the top `compute.train_layers` decoder layers learning when that is set."""
    model = load_model(model)
    if compute.gradient_checkpointing:
        # Non-reentrant: works with frozen inputs (LoRA) and needs no input-grad hooks.
        # (transformers 5 renamed it; the old name warns there.)
        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    top = top_layers(model, compute.train_layers) if compute.train_layers > 0 else None
    if lora.r > 0:
        model = add_lora(
            model,
            r=lora.r,
            alpha=lora.alpha,
            dropout=lora.dropout,
            target_modules=lora.target_modules,
            layers=top,
        )
    elif top is not None:
        # Nothing below the lowest trained layer needs a gradient, so autograd's backward
        # pass ends there: the saving is the whole backward of the frozen layers.
        model.requires_grad_(False)
        for index in top:
            model.get_decoder().layers[index].requires_grad_(True)
        norm = getattr(model.get_decoder(), "norm", None)
        if norm is not None:
            norm.requires_grad_(True)
    return model


def top_layers(model: nn.Module, n: int) -> list[int]:
    """Indices of the top `n` decoder layers of `model`."""
    layers = getattr(model.get_decoder(), "layers", None) if hasattr(model, "get_decoder") else None
    if layers is None:
        raise ValueError(
            "train_layers needs a decoder with a `layers` list (Llama, Qwen, Mistral, ...); "
            "set compute.train_layers: 0 to train every layer of this model."
        )
    if n > len(layers):
        raise ValueError(f"train_layers={n} but the model has {len(layers)} decoder layers.")
    return list(range(len(layers) - n, len(layers)))


def reference_forward(
    accelerator: Any, net: nn.Module, ref_net: nn.Module | None, forward: Callable[[Any], T]
) -> T:
    """`forward(model)` on the reference: the frozen copy (under autocast, as the trained
    model's own forward is), or under LoRA the trained model with its adapters off."""
    if ref_net is not None:
        with accelerator.autocast():
            return forward(ref_net)
    inner = accelerator.unwrap_model(net).model
    with inner.disable_adapter() if is_lora(inner) else nullcontext():
        return forward(net)


def is_lora(model: nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


COMPILE_BACKEND = "inductor"
"""torch.compile's backend for `CompiledLayers`."""


COMPILE_TOKENS = 4_000_000
"""`compute.compile=auto` compiles a stage that plans at least this many tokens per process
(its share of all sides of all examples, times the epochs) on a GPU. Past the break-even of the
measured runs (random weights of SmolLM2-135M's shape, bf16, benchmarks/results/*-cuda.md): SFT
compiled 48,236 tokens per wall second padded against 27,612 eager on an H200 (runs of 2b149dc
and 9aa154a), after 33 s of compiling (about 2.1 M tokens to pay it back); DPO 51,470 against
22,003 on an H100 (ddf3c25 and 4d06cd9), after 87 s (about 3.3 M)."""


def compiling(
    setting: bool | str, model: nn.Module, device: torch.device, planned_tokens: int | None
) -> bool:
    """Whether a stage runs `model`'s decoder layers compiled (`compute.compile`): true /
    false as set; `auto` on a CUDA device for `planned_tokens` >= `COMPILE_TOKENS` (None: not
    known ahead, as for GRPO, so not compiled) and a model it can compile
    (`CompiledLayers.fits`: `auto` never fails a stage its user did not ask to compile)."""
    if setting != "auto":
        return bool(setting)
    return (
        device.type == "cuda"
        and planned_tokens is not None
        and planned_tokens >= COMPILE_TOKENS
        and CompiledLayers.fits(model)
    )


class CompiledLayers:
    """A model's decoder layers with their forward compiled (`torch.compile`, shapes dynamic),
    put in place only while `AgentLogps` computes (`with compiled:`), so that whatever else
    runs the same module (a policy decoding between GRPO steps) runs it as it was.

    Why: a small model's training step on a GPU waits on kernel launches (issue 37), and most
    of a layer's launches are elementwise (norms, rotary embedding, activation), which the
    compiler fuses. The layers share one compilation (one code, inputs of any length). With
    activation checkpointing on, the checkpoint moves inside the compiled call (the layers'
    own is off meanwhile): the recomputation is then part of the compiled backward, whether
    the transformers at hand checkpoints in a layer's `__call__` (5.17) or its `forward`
    (5.24), and never runs after the layers are put back. `backend`: torch.compile's
    (`COMPILE_BACKEND` unless given; tests use a cheap one)."""

    @staticmethod
    def fits(model: nn.Module) -> bool:
        """Whether `model` (or, with LoRA, its base) has decoder layers to compile."""
        base = model.get_base_model() if is_lora(model) else model
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
        return getattr(decoder, "layers", None) is not None

    def __init__(self, model: nn.Module, backend: str | None = None) -> None:
        layers = getattr(model.get_decoder(), "layers", None)
        if layers is None:
            raise ValueError(
                f"compute.compile needs a decoder with `layers`; {type(model).__name__} has none."
            )
        self.layers = list(layers)
        self.checkpointing = [bool(getattr(m, "gradient_checkpointing", False)) for m in layers]
        run = torch.compile(_layer_forward, dynamic=True, backend=backend or COMPILE_BACKEND)
        self._compiled = [
            functools.partial(run, m.forward, checkpoint)
            for m, checkpoint in zip(self.layers, self.checkpointing, strict=True)
        ]

    def __enter__(self) -> CompiledLayers:
        for layer, compiled in zip(self.layers, self._compiled, strict=True):
            layer.forward = compiled
            if hasattr(layer, "gradient_checkpointing"):
                layer.gradient_checkpointing = False
        return self

    def __exit__(self, *exc: object) -> None:
        for layer, checkpoint in zip(self.layers, self.checkpointing, strict=True):
            del layer.forward  # the class's forward again
            if hasattr(layer, "gradient_checkpointing"):
                layer.gradient_checkpointing = checkpoint


def _layer_forward(forward: Callable, checkpoint: bool, *args: Any, **kwargs: Any) -> Any:
    """A layer's `forward`, checkpointed where gradients are recorded (`CompiledLayers`)."""
    if checkpoint and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return forward(*args, **kwargs)


class AgentLogps(nn.Module):
    """A causal LM whose forward returns summed agent-token log-probs per sequence.

    `compile_layers`: run the decoder layers compiled (`CompiledLayers`), for training on a
    GPU (`compute.compile`)."""

    def __init__(self, model: nn.Module, *, compile_layers: bool = False) -> None:
        super().__init__()
        self.model = model
        base = model.get_base_model() if is_lora(model) else model
        config = getattr(base, "config", None)
        plain_head = not any(getattr(config, k, None) for k in _HEAD_EXTRAS)
        self._fast = (
            plain_head and hasattr(base, "get_decoder") and hasattr(base, "get_output_embeddings")
        )
        self._base = [base]  # a list: not a second registered copy of the submodule
        self._compiled = CompiledLayers(base) if compile_layers else None

    def can_fork(self) -> bool:
        """Whether this model can take forked pairs: the fast path, on SDPA (switched to
        `coevo.attention`, which runs the forks; exact, the checkpoint unchanged), and
        no sliding window (the forks' attention has none)."""
        base = self._base[0]
        config = getattr(base, "config", None)
        window = getattr(config, "sliding_window", None) and getattr(
            config, "use_sliding_window", True
        )
        return self._fast and not window and use_packed_attention(base)

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """See `logps`; with the layers compiled where `compile_layers` was asked."""
        with self._compiled or nullcontext():
            return self.logps(*args, **kwargs)

    def logps(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        action_mask: torch.Tensor | None,
        *,
        per_token: bool = False,
        position_ids: torch.Tensor | None = None,
        forks: PairForks | None = None,
        scored: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids, attention_mask, action_mask: (batch, seq) -> logps (batch,), tokens (batch,).

        Same numbers as `sequence_logps(model(input_ids).logits, input_ids, action_mask)`.
        With `per_token` (GRPO) it returns instead each agent token's log-prob and the entropy
        of the model's distribution where it was predicted (detached), both (batch, seq - 1):
        position t scores token t + 1, 0 off the agent tokens.

        With `forks` (a `collate_forked` batch: input_ids, position_ids, forks, scored; the
        masks unused; only where `can_fork()`) it returns the pairs' chosen sides, then their
        rejected sides, as `collate_dpo`'s rows would.

        With `lengths` (a `collate_packed` batch: input_ids, position_ids, action_mask of one
        row, the sequences' lengths; only where `can_fork()`) it returns per sequence what
        the padded rows of those sequences would give.
        """
        if forks is not None:
            if per_token:
                raise ValueError("Forked pairs give per-sequence log-probs only.")
            return self._score_forks(input_ids, position_ids, forks, scored)
        if lengths is not None:
            if per_token:
                raise ValueError("Packed sequences give per-sequence log-probs only.")
            return self._score_packed(input_ids, position_ids, action_mask, lengths)
        row_lengths = _right_padded_lengths(attention_mask)
        if row_lengths is None:
            return self._score(input_ids, attention_mask, action_mask, per_token)
        # Under causal attention a real token never sees the pads that follow it, so the mask
        # changes nothing we score; without it SDPA takes its fused causal kernel, which
        # neither materialises (heads, seq, seq) weights nor a 4-D mask. Rows of unlike
        # lengths (a pair's chosen and rejected sides) go through in groups of like length,
        # each cut to its longest row: pads cost a forward and a backward like real tokens.
        groups = length_groups(row_lengths)
        if len(groups) == 1:
            return self._score(input_ids, None, action_mask, per_token)
        parts = []
        for rows in groups:
            index = torch.tensor(rows, device=input_ids.device)
            longest = max(row_lengths[r] for r in rows)
            ids, action = input_ids[index, :longest], action_mask[index, :longest]
            parts.append(self._score(ids, None, action, per_token))
        # Back to the batch's row order (and, per token, its width).
        order = torch.tensor([r for rows in groups for r in rows], device=input_ids.device)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order), device=order.device)
        width = input_ids.shape[1] - 1
        merged = []
        for values in zip(*parts, strict=True):
            if per_token:
                values = [nn.functional.pad(v, (0, width - v.shape[1])) for v in values]
            merged.append(torch.cat(values).index_select(0, inverse))
        return merged[0], merged[1]

    def _score(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        action_mask: torch.Tensor,
        per_token: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` on one batch as it is (attention_mask None: no pads before a real token)."""
        target = action_mask[:, 1:].to(torch.bool)  # (batch, seq - 1): token t + 1 is scored
        tokens = target.sum(-1)
        if not self._fast:
            logits = self.model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).logits
            if per_token:
                return _per_token(logits[:, :-1][target], input_ids[:, 1:][target], target)
            return sequence_logps(logits, input_ids, action_mask), tokens
        base = self.model.get_base_model() if is_lora(self.model) else self.model
        hidden = base.get_decoder()(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state  # (batch, seq, hidden)
        picked = hidden[:, :-1][target]  # (agent tokens, hidden)
        labels = input_ids[:, 1:][target]  # (agent tokens,)
        logps, entropy = _head(base, picked, labels, entropy=per_token)  # (agent tokens,)
        if per_token:
            zeros = logps.new_zeros(target.shape)
            return zeros.masked_scatter(target, logps), zeros.masked_scatter(target, entropy)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        rows = rows.unsqueeze(1).expand_as(target)[target]  # (agent tokens,) sequence of each
        per_seq = torch.zeros(input_ids.shape[0], device=logps.device, dtype=logps.dtype)
        return per_seq.index_add(0, rows, logps), tokens

    def _score_forks(
        self,
        input_ids: torch.Tensor,  # (1, tokens)
        position_ids: torch.Tensor,  # (1, tokens)
        forks: PairForks,
        scored: torch.Tensor,  # (4, agent tokens): row, id, pair, side
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.can_fork():  # another attention would drop the forks and mix the sides
            raise ValueError(
                "This model cannot take forked pairs (it needs SDPA attention and no sliding "
                "window); train it with dpo.shared_prefix: false."
            )
        base = self.model.get_base_model() if is_lora(self.model) else self.model
        hidden = base.get_decoder()(
            input_ids=input_ids,
            attention_mask=fork_mask(input_ids.device),
            position_ids=position_ids,
            use_cache=False,
            pair_forks=forks,
        ).last_hidden_state[0]  # (tokens, hidden)
        rows, labels, pair, side = scored
        logps, _ = _head(base, hidden[rows], labels)
        pairs = forks.lengths.shape[0]
        sums, counts = [], []
        # Weights, not a boolean mask or a bincount: those read sizes back from the device.
        for other in (2, 1):  # chosen: shared + chosen tokens; rejected: shared + rejected
            keep = side != other
            zeros = torch.zeros(pairs, device=logps.device, dtype=logps.dtype)
            sums.append(zeros.index_add(0, pair, logps * keep))
            counts.append(torch.zeros_like(zeros, dtype=torch.long).index_add(0, pair, keep.long()))
        return torch.cat(sums), torch.cat(counts)

    def _score_packed(
        self,
        input_ids: torch.Tensor,  # (1, tokens)
        position_ids: torch.Tensor,  # (1, tokens)
        action_mask: torch.Tensor,  # (1, tokens), 0 on each sequence's first token
        lengths: torch.Tensor,  # (sequences,)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.can_fork():  # another attention would let sequences see each other
            raise ValueError(
                "This model cannot take packed sequences (it needs SDPA attention and no "
                "sliding window); train it with sft.packing: false."
            )
        base = self.model.get_base_model() if is_lora(self.model) else self.model
        bounds = nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
        packed = PackedSeqs(tuple(lengths.tolist()), bounds)
        hidden = base.get_decoder()(
            input_ids=input_ids,
            attention_mask=fork_mask(input_ids.device),
            position_ids=position_ids,
            use_cache=False,
            packed_seqs=packed,
        ).last_hidden_state[0]  # (tokens, hidden)
        # A sequence's first token is never scored, so a scored token and the row before it
        # are always of one sequence.
        target = action_mask[0, 1:].to(torch.bool)  # (tokens - 1,)
        logps, _ = _head(base, hidden[:-1][target], input_ids[0, 1:][target])
        sequence = torch.repeat_interleave(
            torch.arange(len(lengths), device=lengths.device),
            lengths,
            output_size=input_ids.shape[1],
        )[1:][target]  # (agent tokens,) the sequence of each scored token
        zeros = torch.zeros(len(lengths), device=logps.device, dtype=logps.dtype)
        tokens = torch.zeros_like(lengths).index_add(0, sequence, torch.ones_like(sequence))
        return zeros.index_add(0, sequence, logps), tokens


def _head(
    base: nn.Module, hidden: torch.Tensor, labels: torch.Tensor, *, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `labels` under the LM head of `base` applied to `hidden` (rows, hidden),
    with each row's entropy when asked: in chunks of rows for a plain linear head."""
    head = base.get_output_embeddings()
    if type(head) is nn.Linear and head.bias is None:
        return head_logps(hidden, head.weight, labels, chunk=LOGIT_CHUNK, entropy=entropy)
    logits = head(hidden)  # (rows, vocab): LoRA on the head, a bias
    return token_logps(logits, labels), _entropy(logits) if entropy else None


def _entropy(logits: torch.Tensor, chunk: int = LOGIT_CHUNK) -> torch.Tensor:
    """Entropy of each row's distribution, detached. logits: (rows, vocab) -> (rows,)"""
    with torch.no_grad():
        # In chunks of rows: a whole second (rows, vocab) tensor would double the peak.
        parts = []
        for rows in logits.detach().split(chunk):
            logp = torch.log_softmax(rows.float(), dim=-1)
            parts.append(-(logp.exp() * logp).sum(-1))
        return torch.cat(parts) if parts else logits.new_zeros(0, dtype=torch.float32)


def _per_token(
    logits: torch.Tensor, labels: torch.Tensor, target: torch.Tensor, chunk: int = LOGIT_CHUNK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies of the agent tokens, scattered back to (batch, seq - 1).

    logits: (agent tokens, vocab); labels: (agent tokens,); target: (batch, seq - 1) bool, the
    positions the rows of `logits` belong to (row-major order, as `x[target]` picks them).
    """
    logps = token_logps(logits, labels)  # (agent tokens,)
    entropy = _entropy(logits, chunk)
    zeros = logps.new_zeros(target.shape)
    return zeros.masked_scatter(target, logps), zeros.masked_scatter(target, entropy)


def _right_padded_lengths(attention_mask: torch.Tensor) -> list[int] | None:
    """Each row's length when every row is ones then zeros; None when some row has left
    padding or holes (those need the real mask)."""
    lengths = attention_mask.sum(-1, keepdim=True)  # (batch, 1)
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    if not torch.equal(attention_mask.to(torch.bool), positions < lengths):
        return None
    return lengths.squeeze(1).tolist()


def frozen_copy(model: nn.Module) -> nn.Module:
    """A detached, frozen copy of `model` to serve as a live DPO reference."""
    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref


def finish_model(model: nn.Module) -> nn.Module:
    """The plain model to hand back and save: LoRA adapters merged into the base weights."""
    return model.merge_and_unload() if is_lora(model) else model


def save_model(model: nn.Module, out_dir: Path, tokenizer: Any = None) -> None:
    """Write a loadable Hugging Face directory (`from_pretrained(out_dir)`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)


def mixed_precision(choice: str, *, cpu: bool = False) -> str:
    """Resolve `auto`: bf16 on a GPU that has it; otherwise none (CPU bf16 autocast is slow)."""
    if choice not in ("auto", "no", "bf16", "fp16"):
        raise ValueError(f"mixed_precision must be auto, no, bf16 or fp16, got {choice!r}.")
    if choice != "auto":
        return choice
    if not cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16"
    return "no"
