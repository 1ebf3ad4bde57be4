"""Supervised fine-tuning on the agent's tokens only (Eq. 5), on accelerate.

    result = train_sft(model_or_path, examples, SftConfig(output_dir="runs/x/sft"))

`examples` are rendered trajectories (`batches.sft_examples`). The loop: resume if a
checkpoint exists, then per optimizer step a window of micro-batches, NLL per agent token over
the whole window, clip, AdamW, schedule; log, eval, checkpoint; finally the merged model in
`output_dir/model`. `accelerate launch` runs the same loop on many GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import set_seed
from torch.utils.data import DataLoader

from coevo.train.batches import LengthBatches, TokenSeq, check_seq, collate_sft
from coevo.train.loop import (
    Meter,
    RunDir,
    TrainResult,
    check_loop_settings,
    finish,
    global_sum,
    lr_factor,
    make_accelerator,
    make_optimizer,
    progress_bar,
    sync_unless,
    windows,
)
from coevo.train.model import AgentLogps, trainable

LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class SftConfig:
    """Settings of one SFT run (defaults: the paper's Appendix B where they apply)."""

    output_dir: str = "runs/sft"
    """Checkpoints, `metrics.jsonl` and the final `model/` go here; a rerun resumes from it."""
    epochs: int = 3
    """Passes over the examples."""
    batch_size: int = 8
    """Sequences per micro-batch per process."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; the step's batch is batch_size * grad_accum * GPUs."""
    lr: float = 1e-5
    """Peak AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_ratio: float = 0.03
    """Share of the steps spent in linear warm-up."""
    schedule: str = "cosine"
    """After warm-up: `cosine` (to 0), `linear` (to 0) or `constant`."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables it."""
    mixed_precision: str = "auto"
    """`auto` (bf16 on a GPU that has it, else off), `no`, `bf16` or `fp16`."""
    seed: int = 0
    """Seeds the data order and every RNG; two runs with one seed are identical."""
    eval_every: int = 0
    """Eval loss every this many steps (0: at the end of each epoch); needs eval examples."""
    save_every: int = 200
    """Checkpoint every this many steps; one is always written at the end."""
    save_every_minutes: float = 3.0
    """Also checkpoint once the last checkpoint is this old, so a kill costs minutes of
    training at most, however far apart `save_every` steps are (0: by steps only). Writing
    one for SmolLM2-135M (weights and AdamW state, 1.6 GB) took 2.9 s: 1.6% at 3 minutes."""
    save_total_limit: int = 2
    """Checkpoints kept (oldest deleted first)."""
    resume: bool = True
    """Continue from the latest checkpoint in output_dir when there is one."""
    stop_after_steps: int | None = None
    """End the run after this optimizer step with a checkpoint, as if cut off; the schedule
    still spans all epochs, so a later run with the same output_dir finishes the job."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: far less memory, about a third more time."""
    lora_r: int = 0
    """LoRA rank; 0 trains every weight."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input."""
    lora_target_modules: tuple[str, ...] = field(default=LLAMA_LINEAR)
    """Names of the linear layers that get adapters (`["all-linear"]` for all of them)."""
    train_layers: int = 0
    """Train only the top N decoder layers (with LoRA: put adapters only there); 0 trains all.
    The backward pass stops below them: 10 of SmolLM2-135M's 30 layers made a CPU step 2.2x
    faster. Embeddings (tied to the LM head in small models) stay frozen when N > 0."""
    save_final_model: bool = True
    """Write the trained (LoRA-merged) model to output_dir/model."""
    progress: bool = True
    """Show a rich progress bar."""

    def validate(self) -> None:
        check_loop_settings(self)


def train_sft(
    model: Any,
    examples: Sequence[TokenSeq],
    config: SftConfig,
    *,
    eval_examples: Sequence[TokenSeq] = (),
    tokenizer: Any = None,
) -> TrainResult:
    """Fine-tune `model` (an HF causal LM or its directory) on the agent tokens of `examples`."""
    config.validate()
    if not examples:
        raise ValueError("train_sft got no examples; render some trajectories first.")
    for i, e in enumerate([*examples, *eval_examples]):
        check_seq(e, f"SFT example {i}")
    accelerator = make_accelerator(config.mixed_precision)
    set_seed(config.seed)

    model = trainable(model, config)
    net = AgentLogps(model)
    optimizer = make_optimizer(net, config.lr, config.weight_decay)
    sampler = LengthBatches(
        [len(e.input_ids) for e in examples], config.batch_size, seed=config.seed
    )
    loader = DataLoader(list(examples), batch_sampler=sampler, collate_fn=collate_sft)
    net, optimizer, loader = accelerator.prepare(net, optimizer, loader)
    steps_per_epoch = math.ceil(len(loader) / config.grad_accum)
    total_steps = steps_per_epoch * config.epochs
    schedule = lr_factor(config.schedule, round(config.warmup_ratio * total_steps), total_steps)
    scheduler = accelerator.prepare(torch.optim.lr_scheduler.LambdaLR(optimizer, schedule))

    run = RunDir(config.output_dir, accelerator, config.save_total_limit)
    step = run.resume() if config.resume else run.reset()
    last = (
        total_steps
        if config.stop_after_steps is None
        else min(total_steps, config.stop_after_steps)
    )
    meter = Meter()
    with progress_bar(accelerator, config.progress) as bar:
        task = bar.add_task("sft", total=total_steps, completed=step, info="")
        while step < last:
            epoch = step // steps_per_epoch
            sampler.epoch = epoch
            # Skip the global batches of this epoch's finished steps (resume mid-epoch).
            done = (step - epoch * steps_per_epoch) * config.grad_accum
            sampler.skip = done * accelerator.num_processes
            net.train()
            for window in windows(loader, config.grad_accum):
                tokens = global_sum(
                    accelerator, sum(int(b["action_mask"][:, 1:].sum()) for b in window)
                )
                loss_sum = 0.0
                for i, batch in enumerate(window):
                    with sync_unless(accelerator, net, i < len(window) - 1):
                        logps, _ = net(
                            batch["input_ids"], batch["attention_mask"], batch["action_mask"]
                        )
                        # DDP averages gradients over processes; * num_processes undoes that, so
                        # the gradient is the NLL summed over all processes / all their tokens.
                        loss = -logps.sum() * accelerator.num_processes / tokens
                        accelerator.backward(loss)
                    loss_sum += float(-logps.detach().sum())
                grad_norm = (
                    accelerator.clip_grad_norm_(net.parameters(), config.max_grad_norm)
                    if config.max_grad_norm > 0
                    else torch.tensor(float("nan"))
                )
                lr = scheduler.get_last_lr()[0]  # the rate this step used
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                seen = global_sum(accelerator, sum(int(b["attention_mask"].sum()) for b in window))
                record = {
                    "step": step,
                    "epoch": epoch,
                    "loss": global_sum(accelerator, loss_sum) / tokens,
                    "lr": lr,
                    "grad_norm": float(grad_norm),
                    "tokens_per_s": meter.rate(int(seen)),
                }
                run.log(record)
                bar.update(task, completed=step, info=f"loss {record['loss']:.4f}")
                end_of_epoch = step % steps_per_epoch == 0
                due = step % config.eval_every == 0 if config.eval_every else end_of_epoch
                if eval_examples and (due or step == total_steps):
                    eval_loss = evaluate_sft(net, eval_examples, config.batch_size, accelerator)
                    run.log({"step": step, "epoch": epoch, "eval_loss": eval_loss})
                    net.train()
                if (
                    step % config.save_every == 0
                    or step == last
                    or run.due(config.save_every_minutes)
                ):
                    run.save(step, epoch)
                if step >= last or end_of_epoch:
                    break

    return finish(accelerator, net, run, step, total_steps, config, tokenizer)


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
    return global_sum(accelerator, nll) / global_sum(accelerator, tokens)
