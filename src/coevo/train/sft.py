"""Supervised fine-tuning on the agent's tokens only (Eq. 5), on accelerate.

    result = train_sft(model_or_path, examples, SftConfig(), output_dir="runs/x/sft")

`examples` are rendered trajectories (`batches.sft_examples`). The loop: resume if a
checkpoint exists, then per optimizer step a window of micro-batches, NLL per agent token over
the whole window, clip, AdamW, schedule; log, eval, checkpoint; finally the merged model in
`output_dir/model`. `accelerate launch` runs the same loop on many GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from coevo.attention import sdpa_backends
from coevo.train import loop
from coevo.train.batches import LengthBatches, TokenSeq, check_seq, collate_packed, collate_sft
from coevo.train.settings import Optim, TrainerConfig


@dataclass(frozen=True)
class SftConfig(TrainerConfig):
    """Settings of one SFT run (defaults: the paper's Appendix B where they apply)."""

    epochs: int = 3
    """Passes over the examples."""
    batch_size: int = 8
    """Sequences per micro-batch per process."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; the step's batch is batch_size * grad_accum * GPUs."""
    packing: bool | None = None
    """Send each micro-batch through the model as one row, its sequences one after another
    with positions restarting, attention kept within each (`collate_packed`): no pads, one
    forward call, the same loss and gradients up to float rounding. SDPA models without a
    sliding window; others take padded rows as usual. On the CPU a little faster than padded
    length-grouped batches (benchmarks/results/model_speed.md); on CUDA one varlen flash
    call per layer. None (auto): packed on the CPU, padded on a GPU until the varlen path
    has been measured there (issue 37); true or false chooses."""
    eval_every: int = 0
    """Eval loss every this many steps (0: at the end of each epoch), and once before the
    first; needs eval examples."""
    optim: Optim = field(default_factory=Optim)
    """AdamW and its schedule (paper: lr 1e-5, 3% warm-up, cosine)."""

    COUNTS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "grad_accum")


def train_sft(
    model: Any,
    examples: Sequence[TokenSeq],
    config: SftConfig,
    *,
    output_dir: str | Path,
    seed: int = 0,
    eval_examples: Sequence[TokenSeq] = (),
    tokenizer: Any = None,
    device: str = "auto",
    resume: bool = True,
    stop_after_steps: int | None = None,
    save_model: bool = True,
) -> loop.TrainResult:
    """Fine-tune `model` (an HF causal LM or its directory) on the agent tokens of `examples`.

    `device`: `cpu`, or `auto` for accelerate's choice (`coevo.train.loop.make_accelerator`).

    Checkpoints, `metrics.jsonl` and the final `model/` go to `output_dir`, and a rerun with
    the same directory resumes there (`resume`, `stop_after_steps`, `save_model`:
    `coevo.train.loop`). `seed` seeds the data order and every RNG: two runs with one seed are
    identical.
    """
    if not examples:
        raise ValueError("train_sft got no examples; render some trajectories first.")
    for i, e in enumerate([*examples, *eval_examples]):
        check_seq(e, f"SFT example {i}")
    out = loop.begin(
        config, output_dir, seed, device, resume=resume, stop_after_steps=stop_after_steps
    )
    accelerator = out.accelerator
    lengths = [len(e.input_ids) for e in examples]
    processes = accelerator.num_processes
    net, _, optimizer = loop.prepare_model(
        model, config, accelerator, planned_tokens=loop.planned(lengths, config, processes)
    )
    packed = accelerator.device.type == "cpu" if config.packing is None else config.packing
    fork = accelerator.unwrap_model(net).can_fork()
    collate = collate_packed if packed and fork else collate_sft
    passes = loop.Passes(examples, lengths, collate, config, accelerator, seed)
    total_steps = passes.total_steps
    scheduler = loop.make_scheduler(accelerator, optimizer, config.optim, total_steps)

    step = start = out.start(net, total_steps)
    last = out.last_step(total_steps)
    meter = loop.Meter()
    if eval_examples and start == 0:  # where training starts from, to compare with
        before = evaluate_sft(net, eval_examples, config.batch_size, accelerator)
        out.log({"step": 0, "epoch": 0, "eval_loss": before})
    net.train()
    with loop.progress_bar(accelerator, config.progress) as bar, sdpa_backends(accelerator.device):
        task = bar.add_task("sft", total=total_steps, completed=step, info="")
        for step, epoch, window in passes.steps(out, start):
            tokens = loop.global_sum(
                accelerator, sum(int(b["action_mask"][:, 1:].sum()) for b in window)
            )
            seen = loop.global_sum(accelerator, sum(real_tokens(b) for b in window))
            # Summed on the device and read once, after the optimizer step is queued: on a
            # GPU each read waits for all queued work.
            loss_sum = torch.zeros((), device=accelerator.device)
            for i, batch in enumerate(window):
                with loop.sync_unless(accelerator, net, i < len(window) - 1):
                    logps, _ = sft_logps(net, batch)
                    # DDP averages gradients over processes; * num_processes undoes that, so
                    # the gradient is the NLL summed over all processes / all their tokens.
                    loss = -logps.sum() * accelerator.num_processes / tokens
                    accelerator.backward(loss)
                loss_sum += -logps.detach().sum()
            grad_norm, lr = loop.optimizer_step(
                accelerator, net, optimizer, scheduler, config.optim
            )
            record = {
                "step": step,
                "epoch": epoch,
                "loss": loop.global_sum(accelerator, float(loss_sum)) / tokens,
                "lr": lr,
                "grad_norm": grad_norm,
                "tokens_per_s": meter.rate(int(seen)),
            }
            out.log(record)
            bar.update(task, completed=step, info=f"loss {record['loss']:.4f}")
            end_of_epoch = step % passes.steps_per_epoch == 0
            due = step % config.eval_every == 0 if config.eval_every else end_of_epoch
            if eval_examples and (due or step == total_steps):
                eval_loss = evaluate_sft(net, eval_examples, config.batch_size, accelerator)
                out.log({"step": step, "epoch": epoch, "eval_loss": eval_loss})
                net.train()
            if out.save_due(step, last):
                out.save(step, epoch)

    return loop.finish(net, out, step, total_steps, tokenizer, save=save_model)


def sft_logps(net: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed agent-token log-probs and agent-token counts per sequence, (sequences,) each, of
    a `collate_sft` or `collate_packed` batch."""
    if "lengths" in batch:
        return net(
            batch["input_ids"],
            None,
            batch["action_mask"],
            position_ids=batch["position_ids"],
            lengths=batch["lengths"],
        )
    return net(batch["input_ids"], batch["attention_mask"], batch["action_mask"])


def real_tokens(batch: dict[str, torch.Tensor]) -> int:
    """The tokens of a batch's sequences, pads left out."""
    if "lengths" in batch:
        return batch["input_ids"].shape[1]
    return int(batch["attention_mask"].sum())


@torch.no_grad()
def evaluate_sft(
    net: torch.nn.Module, examples: Sequence[TokenSeq], batch_size: int, accelerator: Any
) -> float:
    """NLL per agent token over `examples`, each example counted exactly once over all processes."""
    net.eval()
    order = LengthBatches([len(e.input_ids) for e in examples], batch_size, seed=0, shuffle=False)
    mine = order.batches(0)[accelerator.process_index :: accelerator.num_processes]
    nll, tokens = 0.0, 0
    for idx in mine:
        batch = {
            k: v.to(accelerator.device) for k, v in collate_sft([examples[i] for i in idx]).items()
        }
        logps, n = net(batch["input_ids"], batch["attention_mask"], batch["action_mask"])
        nll -= float(logps.sum())
        tokens += int(n.sum())
    return loop.global_sum(accelerator, nll) / loop.global_sum(accelerator, tokens)
