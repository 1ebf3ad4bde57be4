"""Weighted multi-turn DPO (Eq. 7) with the per-pair SFT term of Eq. 9, on accelerate.

    result = train_dpo(model_or_path, dpo_examples(pairs, tok), DpoConfig(), output_dir=...)

Chosen and rejected sides go through the model in one forward pass, as forks where the model
allows (`shared_prefix`: the tokens both sides open with are computed once), else as rows. The
reference log-probs are computed once, before the first step, over the whole pair set (with the
model as it is then: the policy at the iteration's start; `REFERENCE_BATCHES` micro-batches a
forward, read back from the device once), kept on the examples and written to
`output_dir/reference_logps.json`, so no second model sits in memory and a resumed run uses the
same reference. `reference="live"` keeps a frozen copy instead (with LoRA: the base model with
adapters switched off, which costs no memory).
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object, send_to_device

from coevo.attention import sdpa_backends
from coevo.train import loop
from coevo.train.batches import (
    DpoExample,
    LengthBatches,
    check_seq,
    collate_dpo,
    collate_forked,
)
from coevo.train.losses import DpoLoss, dpo_loss
from coevo.train.model import reference_forward
from coevo.train.settings import Optim, TrainerConfig

REFERENCE_FILE = "reference_logps.json"
REFERENCE_BATCHES = 4
"""The reference pass takes this many training micro-batches of pairs per forward: it keeps
no activations for a backward, so a bigger batch costs little memory, and fewer forwards
launch fewer kernels."""


@dataclass(frozen=True)
class DpoConfig(TrainerConfig):
    """Settings of one DPO run (defaults: ETO / the paper's preference phases)."""

    beta: float = 0.1
    """DPO temperature: how far the policy may move from the reference (paper: 0.1 to 0.5)."""
    lambda_dpo: float = 1.0
    """Weight of the DPO term of Eq. 9; the SFT weight is per pair (`Pair.sft_weight`)."""
    reference: str = "precomputed"
    """`precomputed` (once, before training, stored with the pairs) or `live` (a frozen copy)."""
    epochs: int = 3
    """Passes over the pairs (unless `steps` is set)."""
    steps: int | None = None
    """Optimizer steps in all, in place of `epochs`: passes over the pairs follow one another
    (each shuffled anew) until this many steps are taken, the last pass cut short. Gives a run
    another's budget (benchmarks/learning.py's `eto_matched`: ETO with the failure-agent
    target's steps). None: `epochs` passes."""
    batch_size: int = 4
    """Pairs per micro-batch per process (the forward pass holds twice as many sequences)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; a step learns from batch_size * grad_accum * GPUs
    pairs."""
    shared_prefix: bool = True
    """Compute the tokens a pair's two sides open with once, not twice (same results up to
    float rounding; SDPA models without a sliding window, else rows as usual)."""
    optim: Optim = field(
        default_factory=lambda: Optim(lr=1e-6, warmup_ratio=0.1, schedule="constant")
    )
    """AdamW and its schedule (paper: lr 1e-6, later iterations 5e-7; 10% warm-up, constant)."""

    COUNTS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "grad_accum")

    def validate(self) -> None:
        super().validate()
        if self.beta <= 0:
            raise ValueError(f"DpoConfig.beta must be > 0, got {self.beta}.")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(
                "DpoConfig.steps must be a whole number >= 1, or null for `epochs` passes; "
                f"got {self.steps!r}."
            )
        if self.reference not in ("precomputed", "live"):
            raise ValueError(
                f"DpoConfig.reference must be 'precomputed' or 'live', got {self.reference!r}."
            )


def train_dpo(
    model: Any,
    examples: Sequence[DpoExample],
    config: DpoConfig,
    *,
    output_dir: str | Path,
    seed: int = 0,
    tokenizer: Any = None,
    device: str = "auto",
    resume: bool = True,
    stop_after_steps: int | None = None,
    save_model: bool = True,
) -> loop.TrainResult:
    """Train `model` (an HF causal LM or its directory) on preference pairs with Eq. 9.

    Checkpoints, reference log-probs, `metrics.jsonl` and the final `model/` go to
    `output_dir`; a rerun with the same directory resumes there (`resume`, `stop_after_steps`,
    `save_model`: `coevo.train.loop`). `seed` seeds the data order and every RNG. `device`:
    `cpu`, or `auto` for accelerate's choice.
    """
    if not examples:
        raise ValueError("train_dpo got no pairs; build some with coevo.pairs first.")
    for i, e in enumerate(examples):
        check_seq(e.chosen, f"Chosen side of pair {i}")
        check_seq(e.rejected, f"Rejected side of pair {i}")
    out = loop.begin(
        config, output_dir, seed, device, resume=resume, stop_after_steps=stop_after_steps
    )
    accelerator = out.accelerator
    live = config.reference == "live"
    sides = [len(e.chosen.input_ids) + len(e.rejected.input_ids) for e in examples]
    planned = loop.planned(sides, config, accelerator.num_processes)
    net, ref_net, optimizer = loop.prepare_model(
        model, config, accelerator, reference=live, planned_tokens=planned
    )
    nets = [accelerator.unwrap_model(net), *([ref_net] if ref_net is not None else [])]
    forked = config.shared_prefix and all(n.can_fork() for n in nets)
    collate = collate_forked if forked else collate_dpo
    if not live:
        # Before resume: the reference is the model as given, never a half-trained one.
        examples = reference_logps(net, examples, config, out, collate)

    passes = loop.Passes(examples, [e.length for e in examples], collate, config, accelerator, seed)
    total_steps = passes.total_steps
    scheduler = loop.make_scheduler(accelerator, optimizer, config.optim, total_steps)

    step = start = out.start(net, total_steps)
    last = out.last_step(total_steps)
    meter = loop.Meter()
    net.train()
    with loop.progress_bar(accelerator, config.progress) as bar, sdpa_backends(accelerator.device):
        task = bar.add_task("dpo", total=total_steps, completed=step, info="")
        for step, epoch, window in passes.steps(out, start):
            pairs = loop.global_sum(accelerator, sum(len(b["weight"]) for b in window))
            sums = None
            for i, batch in enumerate(window):
                with loop.sync_unless(accelerator, net, i < len(window) - 1):
                    loss, tokens = batch_loss(accelerator, net, ref_net, batch, config)
                    # Mean over the window's pairs on all processes (DDP averages over
                    # processes, * num_processes undoes it): see losses.py.
                    accelerator.backward(loss.per_pair.sum() * accelerator.num_processes / pairs)
                part = step_sums(loss, tokens)
                sums = part if sums is None else sums + part
            grad_norm, lr = loop.optimizer_step(
                accelerator, net, optimizer, scheduler, config.optim
            )
            # The step's one read of the device: every metric and the token count at once.
            *totals, tokens_seen = accelerator.reduce(sums, reduction="sum").tolist()
            record: dict[str, Any] = {"step": step, "epoch": epoch}
            record.update({k: v / pairs for k, v in zip(DpoLoss.METRICS, totals, strict=True)})
            record.update(lr=lr, grad_norm=grad_norm, tokens_per_s=meter.rate(int(tokens_seen)))
            bar.update(
                task,
                completed=step,
                info=f"loss {record['loss']:.4f} acc {record['reward_accuracy']:.2f}",
            )
            out.step_done(record, epoch, last)

    return loop.finish(net, out, step, total_steps, tokenizer, save=save_model)


def batch_loss(
    accelerator: Accelerator,
    net: Any,
    ref_net: Any,
    batch: dict[str, torch.Tensor],
    config: DpoConfig,
) -> tuple[DpoLoss, torch.Tensor]:
    """The loss of one micro-batch (one forward of the policy over both sides; with a live
    reference, one of the reference) and its token count (a 0-d tensor), on the device."""
    logps, tokens = pair_logps(net, batch)
    chosen, rejected = logps.chunk(2)
    if config.reference == "live":
        ref_chosen, ref_rejected = live_reference(accelerator, net, ref_net, batch)
    else:
        ref_chosen, ref_rejected = batch["ref_chosen"], batch["ref_rejected"]
    loss = dpo_loss(
        chosen,
        rejected,
        ref_chosen,
        ref_rejected,
        beta=config.beta,
        weights=batch["weight"],
        sft_weights=batch["sft_weight"],
        chosen_tokens=tokens.chunk(2)[0],
        lambda_dpo=config.lambda_dpo,
    )
    return loss, batch["tokens"]


def step_sums(loss: DpoLoss, tokens: torch.Tensor) -> torch.Tensor:
    """(len(DpoLoss.METRICS) + 1,) on the device: each metric's batch mean times the batch's pairs,
    then its tokens; a step adds these up over its micro-batches and reads them once."""
    n = loss.per_pair.shape[0]
    return torch.stack([*(v.float() * n for v in loss.metrics().values()), tokens.float()])


def pair_logps(net: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed agent-token log-probs and agent-token counts of a `collate_dpo` or
    `collate_forked` batch: (2 * pairs,) each, the chosen sides, then the rejected ones."""
    if "forks" in batch:
        return net(
            batch["input_ids"],
            None,
            None,
            position_ids=batch["position_ids"],
            forks=batch["forks"],
            scored=batch["scored"],
        )
    return net(batch["input_ids"], batch["attention_mask"], batch["action_mask"])


@torch.no_grad()
def live_reference(
    accelerator: Accelerator, net: Any, ref_net: Any, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference log-probs of a batch's (chosen, rejected) sides (`reference_forward`)."""
    logps = reference_forward(accelerator, net, ref_net, lambda m: pair_logps(m, batch)[0])
    return logps.chunk(2)


def fingerprint(examples: Sequence[DpoExample]) -> str:
    """A hash of the pairs' tokens and masks: which pair set stored reference log-probs belong to."""
    h = hashlib.sha256()
    for e in examples:
        for seq in (e.chosen, e.rejected):
            h.update(array("q", seq.input_ids).tobytes())
            h.update(array("b", seq.action_mask).tobytes())
    return h.hexdigest()


@torch.no_grad()
def reference_logps(
    net: Any,
    examples: Sequence[DpoExample],
    config: DpoConfig,
    out: loop.CheckpointDir,
    collate: Any = collate_dpo,
) -> list[DpoExample]:
    """Examples with their reference log-probs: as given, as stored by the run being resumed,
    or computed now.

    Computed in one pass over the pairs (length-sorted, each process its share), with the
    model in eval mode, then written to out_dir so that a resumed run reuses them.
    """
    if all(e.ref_chosen_logp is not None and e.ref_rejected_logp is not None for e in examples):
        return list(examples)
    accelerator, out_dir = out.accelerator, out.root
    path = out_dir / REFERENCE_FILE
    key = fingerprint(examples)
    if out.resumes and any((out_dir / loop.CHECKPOINTS).glob("step-*")):
        # The model is already part-trained: only the stored reference is the right one.
        stored = json.loads(path.read_text()) if path.exists() else {}
        if stored.get("fingerprint") != key:
            raise ValueError(
                f"{out_dir} holds a DPO run on other pairs (or lost {REFERENCE_FILE}); use a "
                "new output_dir, or resume=False to start over there."
            )
        return [
            replace(e, ref_chosen_logp=c, ref_rejected_logp=r)
            for e, c, r in zip(examples, stored["chosen"], stored["rejected"], strict=True)
        ]
    net.eval()
    # Unwrapped (under autocast still): processes may get unequal shares of the batches, and a
    # DDP forward is a collective (its buffers are broadcast) that all would have to join.
    model = accelerator.unwrap_model(net)
    size = config.batch_size * REFERENCE_BATCHES
    order = LengthBatches([e.length for e in examples], size, seed=0, shuffle=False)
    mine = order.batches(0)[accelerator.process_index :: accelerator.num_processes]
    parts = []
    with loop.progress_bar(accelerator, config.progress) as bar, sdpa_backends(accelerator.device):
        task = bar.add_task("reference log-probs", total=len(mine), info="")
        for idx in mine:
            batch = collate([examples[i] for i in idx])
            logps, _ = pair_logps(model, send_to_device(batch, accelerator.device))
            parts.append(logps.float())  # (2 * pairs,): chosen sides, then rejected ones
            bar.advance(task)
    # One read of the device for the whole pass, not one per batch.
    values = torch.cat(parts).tolist() if parts else []
    found: list[tuple[int, float, float]] = []
    start = 0
    for idx in mine:
        middle, end = start + len(idx), start + 2 * len(idx)
        found.extend(zip(idx, values[start:middle], values[middle:end], strict=True))
        start = end
    found = sorted(gather_object(found))
    chosen_all = [c for _, c, _ in found]
    rejected_all = [r for _, _, r in found]
    if accelerator.is_main_process:
        record = {"fingerprint": key, "chosen": chosen_all, "rejected": rejected_all}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)
    accelerator.wait_for_everyone()
    return [
        replace(e, ref_chosen_logp=c, ref_rejected_logp=r)
        for e, c, r in zip(examples, chosen_all, rejected_all, strict=True)
    ]
