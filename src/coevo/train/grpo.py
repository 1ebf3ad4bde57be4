"""Multi-turn GRPO on accelerate: K episodes of each task, group-relative advantages, a
clipped policy-gradient update on the tokens the agent sampled.

    result = train_grpo(model, tasks, play, GrpoConfig(), output_dir="runs/x/grpo", tokenizer=tok)

Each step reads top to bottom:
1. rollout: the step's tasks (a seeded pass over `tasks`) go to `play`, which plays each
   `samples` times with the model as it is now. `play` gets the trained module itself, so an
   update reaches generation in memory (`coevo.methods.grpo.hf_player` plays it with HFPolicy
   and lockstep rollouts; a generation server would load the new weights there).
2. advantages: each episode's final reward minus its task group's mean, divided by the group's
   std unless `scale_advantages` is off. A group whose rewards are all equal has no signal
   (advantage 0): its share is logged as `no_signal`.
3. update: episodes are rendered (`coevo.render`) from the ids the policy sampled, with the
   log-probs it sampled them with lined up: nothing is re-tokenised. The loss is
   `losses.grpo_loss` (clip-higher 0.2 / 0.28, token mean over every agent token of the
   minibatch, k3 KL to the reference times `kl_coef`), observations masked. `minibatches` > 1
   or `epochs` > 1 take several optimizer steps per rollout batch; the first minibatch is
   on-policy (nothing has changed since sampling), so its ratio is taken as exactly 1 and the
   sampled log-probs are the old log-probs of every later one, where the policy has moved
   (for episodes whose context the budget cut, a no-gradient forward's before the first
   update: their sampled log-probs are another context's; `rescored`).
   On that first minibatch the sampled log-probs are also compared with the fresh forward
   (`sampled_logp_gap`, over episodes that kept their whole context, in every prompt they
   were sampled from too; `context_cut` is the share of the others): a gap above float
   rounding means generation played other weights or another precision than the trainer.
   Before a step that needs old log-probs, the gap is measured on its first micro-batch; over
   `max_logp_gap` (sampling in bf16 on a GPU: about 0.1), every episode's old log-probs come
   from the trainer's own forward instead (one more forward pass; `old_logps_from_trainer`),
   and `sampled_logp_gap` is what that micro-batch measured (the sampled log-probs are gone).
4. log (`metrics.jsonl`, and the trackers of `tracking.log_with`), checkpoint, next step.

The reference (kl_coef > 0) is the model as given, before any update: a frozen copy, or with
LoRA the base model with the adapters off (no copy); kl_coef 0 keeps no reference. Rollout
seeds, task order and minibatch order are derived from `seed` and the step alone, and a
checkpoint holds the weights, optimizer, schedule, RNG states and step, so a run stopped at
any point resumes to the same result as one that never stopped.
"""

from __future__ import annotations

import copy
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from accelerate import Accelerator
from torch import nn

from coevo.attention import sdpa_backends
from coevo.seeds import derive
from coevo.train import loop
from coevo.train.groups import (
    Episode,
    Player,
    TaskOrder,
    check_groups,
    collate,
    episode,
    rollout_seed,
    rollout_stats,
)
from coevo.train.losses import group_advantages, grpo_loss
from coevo.train.model import finish_model, is_lora, reference_forward
from coevo.train.settings import Checkpoints, Optim, TrainerConfig
from coevo.trajectory import Task


@dataclass(frozen=True)
class GrpoConfig(TrainerConfig):
    """Settings of one GRPO run (defaults: CoEvolve's reported settings for 7B models)."""

    steps: int = 120
    """GRPO steps: one rollout batch and its updates each."""
    tasks_per_step: int = 32
    """Tasks in a step's rollout batch (over all processes); passes over the train tasks in a
    seeded order, the few left over at the end of a pass wait for the next."""
    samples: int = 8
    """Episodes per task (K, the group size)."""
    rollout_batch_size: int = 64
    """Episodes advancing together in one batched generate."""
    scale_advantages: bool = True
    """Divide by the group's std (GRPO); off: reward minus the group mean only (Dr. GRPO)."""
    clip_low: float = 0.2
    """The ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.28
    """... and above at 1 + clip_high ("clip-higher")."""
    kl_coef: float = 0.001
    """Weight of the k3 KL to the reference (the model before GRPO); 0 keeps no reference."""
    minibatches: int = 1
    """Optimizer steps per rollout batch, each on its share of the episodes."""
    epochs: int = 1
    """Passes over each rollout batch (each pass `minibatches` optimizer steps)."""
    micro_batch_size: int = 8
    """Episodes per forward pass (a minibatch is accumulated over micro-batches)."""
    max_logp_gap: float = 1e-3
    """Largest |sampled - trainer| log-prob of a token for which the sampled log-probs serve as
    the old log-probs of later minibatches (float32 on one device: about 1e-6; sampled in bf16:
    about 0.1). Over it, a no-gradient trainer forward gives them."""
    eval_every: int = 10
    """(`grpo` method) Evaluate on the test splits every this many steps: one stage each."""
    optim: Optim = field(
        default_factory=lambda: Optim(lr=1e-6, warmup_ratio=0.0, schedule="constant")
    )
    """AdamW and its schedule, stepped once per GRPO step (CoEvolve: lr 1e-6, constant)."""
    checkpoints: Checkpoints = field(default_factory=lambda: Checkpoints(save_every=10))

    COUNTS: ClassVar[tuple[str, ...]] = (
        *("steps", "tasks_per_step", "samples", "rollout_batch_size", "minibatches"),
        *("epochs", "micro_batch_size", "eval_every"),
    )

    def validate(self) -> None:
        super().validate()
        if self.kl_coef < 0:
            raise ValueError(f"GrpoConfig.kl_coef must be >= 0 (0: no KL), got {self.kl_coef}.")
        if not self.max_logp_gap >= 0:
            raise ValueError(f"GrpoConfig.max_logp_gap must be >= 0, got {self.max_logp_gap}.")
        if self.clip_low < 0 or self.clip_high < 0 or self.clip_low >= 1:
            raise ValueError(
                f"GrpoConfig.clip_low must be in [0, 1) and clip_high >= 0, got "
                f"{self.clip_low} and {self.clip_high}."
            )
        if self.samples < 2:
            raise ValueError(
                f"GrpoConfig.samples must be >= 2: advantages compare the samples of one task, "
                f"got {self.samples}."
            )


def train_grpo(
    model: Any,
    tasks: Sequence[Task],
    play: Player,
    config: GrpoConfig,
    *,
    output_dir: str | Path,
    tokenizer: Any,
    seed: int = 0,
    max_length: int | None = None,
    step_tasks: Callable[[int], Sequence[Task]] | None = None,
    device: str = "auto",
    resume: bool = True,
    stop_after_steps: int | None = None,
    save_model: bool = True,
) -> loop.TrainResult:
    """Train `model` (an HF causal LM or its directory) with GRPO on `tasks`.

    `step_tasks(step)` picks a step's `tasks_per_step` tasks instead of the seeded passes over
    `tasks` (agent_data mixes synthesized tasks into every batch); it must depend on the step
    alone, so a resumed run plays what an unbroken one did.

    `tokenizer` renders the episodes (the policy's own); `max_length` is the context budget
    they are rendered with (as the rollouts were played). Checkpoints, `metrics.jsonl` and the
    final `model/` go to `output_dir`; a rerun with the same directory resumes there (`resume`,
    `stop_after_steps`, `save_model`: `coevo.train.loop`). `device`: `cpu`, or `auto` for
    accelerate's choice.
    """
    out = loop.begin(
        config, output_dir, seed, device, resume=resume, stop_after_steps=stop_after_steps
    )
    accelerator = out.accelerator
    if config.tasks_per_step % accelerator.num_processes:
        raise ValueError(
            f"tasks_per_step={config.tasks_per_step} does not split evenly over "
            f"{accelerator.num_processes} processes: make it a multiple of their number."
        )
    if len(tasks) < config.tasks_per_step:
        raise ValueError(
            f"GRPO got {len(tasks)} train tasks for tasks_per_step={config.tasks_per_step}: "
            "lower tasks_per_step or give more tasks."
        )
    # The reference is the model as given: copied before any update (and before a resumed
    # run loads its checkpoint over the weights). With LoRA the base model is the reference.
    net, ref_net, optimizer = loop.prepare_model(
        model, config, accelerator, reference=config.kl_coef > 0
    )
    scheduler = loop.make_scheduler(accelerator, optimizer, config.optim, config.steps)
    policy_module = accelerator.unwrap_model(net).model  # what `play` generates with

    step = out.start(net, config.steps)
    last = out.last_step(config.steps)
    order = TaskOrder(len(tasks), config.tasks_per_step, seed)
    with loop.progress_bar(accelerator, config.progress) as bar, sdpa_backends(accelerator.device):
        task = bar.add_task("grpo", total=config.steps, completed=step, info="")
        while step < last:
            step += 1
            chosen = (
                list(step_tasks(step))
                if step_tasks is not None
                else [tasks[i] for i in order.step(step)]
            )
            mine = chosen[accelerator.process_index :: accelerator.num_processes]

            started = time.perf_counter()
            policy_module.eval()
            with torch.no_grad(), accelerator.autocast():
                played = play(policy_module, mine, step=step, seed=rollout_seed(seed, step))
            rollout_s = time.perf_counter() - started

            groups = check_groups(played, mine, config.samples)
            rewards = torch.tensor([t.reward for t in played], dtype=torch.float32)
            advantages = group_advantages(rewards, groups, scale=config.scale_advantages)
            episodes = [
                episode(t, tokenizer, float(a), max_length)
                for t, a in zip(played, advantages.tolist(), strict=True)
            ]

            started = time.perf_counter()
            net.train()
            if loop.global_sum(accelerator, float(advantages.abs().sum())) > 0:
                stats = update(
                    net, ref_net, episodes, config, accelerator, optimizer, seed=seed, step=step
                )
                stats["update_skipped"] = 0.0
            else:
                # Every group's rewards were equal: every advantage is 0, so the update would
                # spend a whole forward and backward pass on a zero policy gradient.
                stats = {"optimizer_steps": 0, "update_skipped": 1.0}
                if accelerator.is_main_process:
                    loop.console.print(
                        f"[yellow]grpo step {step}: every task's {config.samples} episodes "
                        "scored alike (no signal): update skipped[/]"
                    )
            update_s = time.perf_counter() - started
            lr = scheduler.get_last_lr()[0]  # the rate this step used
            with warnings.catch_warnings():
                # The schedule follows the steps, updated or skipped: a skipped first step is
                # no misordered call, as torch's warning would have it.
                warnings.filterwarnings(
                    "ignore", "Detected call of `lr_scheduler.step", UserWarning
                )
                scheduler.step()

            record = {"step": step, "lr": lr}
            record.update(rollout_stats(accelerator, played, rewards, groups, config.samples))
            record.update(stats)
            record["context_cut"] = (
                loop.global_sum(accelerator, sum(not e.full_context for e in episodes))
                / record["episodes"]
            )
            trained = loop.global_sum(accelerator, sum(len(e.input_ids) for e in episodes))
            sampled = record["sampled_tokens"]
            record.update(
                rollout_s=rollout_s,
                update_s=update_s,
                rollout_tokens_per_s=sampled / max(rollout_s, 1e-9),
                update_tokens_per_s=trained * config.epochs / max(update_s, 1e-9),
                tokens_per_s=trained / max(rollout_s + update_s, 1e-9),
            )
            bar.update(
                task,
                completed=step,
                info=f"reward {record['reward_mean']:.3f} success {record['success_rate']:.2f} "
                f"no-signal {record['no_signal']:.2f}",
            )
            out.step_done(record, 0, last)

    return loop.finish(net, out, step, config.steps, tokenizer, save=save_model)


def update(
    net: nn.Module,
    ref_net: nn.Module | None,
    episodes: Sequence[Episode],
    config: GrpoConfig,
    accelerator: Accelerator,
    optimizer: Any,
    *,
    seed: int,
    step: int,
) -> dict[str, float]:
    """The optimizer steps of one rollout batch; the step's loss numbers, averaged per token."""
    from_trainer = False
    gap = 0.0  # the largest |sampled - trainer| log-prob seen, before any is replaced
    if config.minibatches > 1 or config.epochs > 1:
        size = config.micro_batch_size
        gap = sampled_gap(net, episodes[:size], accelerator.device)
        from_trainer = gap > config.max_logp_gap
        episodes = rescored(net, episodes, accelerator.device, size, every=from_trainer)
    rng = random.Random(derive(seed, "minibatches", step))
    order = list(range(len(episodes)))
    sums: dict[str, float] = {}
    total_tokens = 0.0
    grad_norms: list[float] = []
    for epoch in range(config.epochs):
        rng.shuffle(order)
        for m, part in enumerate(split(order, config.minibatches)):
            on_policy = epoch == 0 and m == 0
            tokens = loop.global_sum(accelerator, sum(episodes[i].tokens for i in part))
            if tokens == 0:
                continue  # no agent token anywhere in this minibatch: nothing to step on
            # Similar lengths share a micro-batch: less padding.
            part = sorted(part, key=lambda i: len(episodes[i].input_ids))
            size = config.micro_batch_size
            micro = [part[i : i + size] for i in range(0, len(part), size)]
            for i, idx in enumerate(micro):
                batch = collate([episodes[j] for j in idx], accelerator.device)
                mask = batch["action_mask"][:, 1:]  # (batch, seq - 1): token t + 1 is scored
                with loop.sync_unless(accelerator, net, i < len(micro) - 1):
                    logps, entropy = net(
                        batch["input_ids"],
                        batch["attention_mask"],
                        batch["action_mask"],
                        per_token=True,
                    )  # (batch, seq - 1) each
                    sampled = batch["old_logps"][:, 1:]
                    if on_policy:
                        # Nothing changed since sampling: the ratio is exactly 1.
                        old = logps.detach()
                        if not from_trainer:  # else `sampled` is this forward's own
                            # Rows whose context the budget cut (here or in a prompt they
                            # were sampled from) were sampled in another context than they
                            # are scored in: their gap says nothing.
                            same = mask.bool() & batch["full_context"][:, None]
                            diff = torch.where(same, (logps.detach() - sampled).abs(), 0.0)
                            gap = max(gap, float(diff.max()) if diff.numel() else 0.0)
                    else:
                        old = sampled
                    ref = reference(accelerator, net, ref_net, batch) if config.kl_coef else None
                    loss = grpo_loss(
                        logps,
                        old,
                        batch["advantage"],
                        mask,
                        ref_logps=ref,
                        beta=config.kl_coef,
                        clip_low=config.clip_low,
                        clip_high=config.clip_high,
                    )
                    # Token mean over the whole minibatch on all processes (DDP averages over
                    # processes; * num_processes undoes it), as SFT normalises (losses.py).
                    accelerator.backward(loss.per_token.sum() * accelerator.num_processes / tokens)
                n = float(mask.sum())
                for key, value in loss.sums().items():
                    if key != "kl" or ref is not None:  # no reference: no KL to report
                        add(sums, key, float(value))
                add(sums, "entropy", float(entropy.sum()))
                total_tokens += n
            grad_norms.append(float(loop.clip(accelerator, net, config.optim)))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    tokens_seen = loop.global_sum(accelerator, total_tokens)
    stats = {k: loop.global_sum(accelerator, v) / max(tokens_seen, 1.0) for k, v in sums.items()}
    stats["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else 0.0
    stats["optimizer_steps"] = len(grad_norms)
    stats["sampled_logp_gap"] = gap
    stats["old_logps_from_trainer"] = float(from_trainer)
    return stats


@torch.no_grad()
def sampled_gap(net: nn.Module, episodes: Sequence[Episode], device: torch.device) -> float:
    """The largest |sampled - trainer| log-prob over the agent tokens of `episodes` that kept
    their whole context (0 when none did)."""
    whole = [e for e in episodes if e.full_context]
    if not whole:
        return 0.0
    batch = collate(whole, device)
    logps, _ = net(
        batch["input_ids"], batch["attention_mask"], batch["action_mask"], per_token=True
    )  # (batch, seq - 1)
    mask = batch["action_mask"][:, 1:].bool()
    diff = (logps.float() - batch["old_logps"][:, 1:]).abs()[mask]
    return float(diff.max()) if diff.numel() else 0.0


def rescored(
    net: nn.Module,
    episodes: Sequence[Episode],
    device: torch.device,
    size: int,
    *,
    every: bool = False,
) -> list[Episode]:
    """`episodes` with the old log-probs of those whose context was cut (or of `every` one)
    taken from a forward of the context they are trained in (no gradient, before any update).
    A cut episode's sampled log-probs belong to another context, and after the first minibatch
    the old log-probs enter the ratio; the others keep theirs (sampled, so no second forward)
    unless sampling's precision put them too far from the trainer's (`max_logp_gap`)."""
    cut = [i for i, e in enumerate(episodes) if every or not e.full_context]
    out = list(episodes)
    with torch.no_grad():
        for start in range(0, len(cut), size):
            part = cut[start : start + size]
            batch = collate([episodes[i] for i in part], device)
            logps, _ = net(
                batch["input_ids"], batch["attention_mask"], batch["action_mask"], per_token=True
            )  # (batch, seq - 1): position t scores token t + 1
            for row, i in enumerate(part):
                n = len(episodes[i].input_ids)
                out[i] = replace(episodes[i], old_logps=[0.0, *logps[row, : n - 1].tolist()])
    return out


def split(order: list[int], parts: int) -> list[list[int]]:
    """`order` cut into `parts` runs of sizes differing by at most one (none empty)."""
    size, extra = divmod(len(order), parts)
    out, start = [], 0
    for p in range(parts):
        end = start + size + (p < extra)
        if end > start:
            out.append(order[start:end])
        start = end
    return out


def add(sums: dict[str, float], key: str, value: float) -> None:
    sums[key] = sums.get(key, 0.0) + value


@torch.no_grad()
def reference(
    accelerator: Accelerator, net: Any, ref_net: Any, batch: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Per-token log-probs (batch, seq - 1) of the reference (`reference_forward`)."""
    args = (batch["input_ids"], batch["attention_mask"], batch["action_mask"])
    return reference_forward(accelerator, net, ref_net, lambda m: m(*args, per_token=True)[0])


def copy_for_saving(model: nn.Module) -> nn.Module:
    """A plain model to save or play mid-run: LoRA adapters merged into a copy (the run
    goes on training the adapters), or the model itself."""
    return finish_model(copy.deepcopy(model)) if is_lora(model) else model
