"""The episodes of a GRPO step: which tasks it plays, the contract of what plays them, the
groups, the rendered episodes the loss reads, and how the step's episodes went.

`coevo.train.grpo` runs the loop; this module turns a step's trajectories into tensors and
numbers. Everything here depends on the seed and the step alone, which is what lets a resumed
run play and train exactly what an uninterrupted one did.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from accelerate import Accelerator
from torch import nn

from coevo.seeds import derive
from coevo.train.batches import pad
from coevo.train.loop import global_sum
from coevo.trajectory import Task, Trajectory, is_success


class Player(Protocol):
    """Plays every task K times (`GrpoConfig.samples`) with `model` as it is now: K
    trajectories per task, task by task (sample 0 first), each agent turn carrying the ids the
    policy sampled and their log-probs. `seed` makes the episodes reproducible; `step` is the
    GRPO step (1-based) they are played for."""

    def __call__(
        self, model: nn.Module, tasks: Sequence[Task], *, step: int, seed: int
    ) -> list[Trajectory]: ...


@dataclass(frozen=True)
class Episode:
    """One rendered episode ready for the loss."""

    input_ids: list[int]
    action_mask: list[int]
    """1 exactly on the ids the agent sampled."""
    old_logps: list[float]
    """Aligned with `input_ids`: the log-prob each agent token was sampled with, 0 elsewhere."""
    advantage: float
    full_context: bool = True
    """False when the context budget (`max_length`) left turns out, here or in a prompt a reply
    was sampled from: the trainer then sees other context than sampling did, so these sampled
    log-probs are not this context's."""

    @property
    def tokens(self) -> int:
        return sum(self.action_mask[1:])


class TaskOrder:
    """Which tasks each step plays: passes over the tasks, each in its own seeded order, cut
    into steps of `per_step` (the remainder of a pass is left out of that pass)."""

    def __init__(self, n_tasks: int, per_step: int, seed: int) -> None:
        self.n, self.per_step, self.seed = n_tasks, per_step, seed
        self.steps_per_pass = n_tasks // per_step

    def step(self, step: int) -> list[int]:
        """Task indices of GRPO step `step` (1-based)."""
        epoch, k = divmod(step - 1, self.steps_per_pass)
        order = list(range(self.n))
        random.Random(derive(self.seed, "order", epoch)).shuffle(order)
        return order[k * self.per_step : (k + 1) * self.per_step]


def rollout_seed(seed: int, step: int) -> int:
    """The rollout seed of one step: every step plays fresh samples, the same after a resume."""
    return derive(seed, "rollout", step)


def check_groups(played: Sequence[Trajectory], tasks: Sequence[Task], samples: int) -> torch.Tensor:
    """Group ids of the episodes (the index of their task), checking `play` kept its contract."""
    expected = [(task.id, k) for task in tasks for k in range(samples)]
    got = [(t.task.id, t.sample) for t in played]
    if got != expected:
        raise ValueError(
            f"play returned {len(got)} episodes where GRPO needs {samples} of each of its "
            f"{len(tasks)} tasks, task by task (sample 0 first); first ones: {got[:3]}."
        )
    return torch.arange(len(tasks)).repeat_interleave(samples)


def episode(t: Trajectory, tokenizer: Any, advantage: float, max_length: int | None) -> Episode:
    """Render `t` from the ids its policy sampled, with their log-probs lined up."""
    from coevo.render import render

    rendered = render(t, tokenizer, max_length=max_length)
    logps = rendered.sampled_logprobs
    if logps is None:
        if any(turn.role == "assistant" for turn in t.turns):
            raise ValueError(
                f"An episode of task {t.task.id!r} has agent turns without the token ids and "
                "log-probs they were sampled with: GRPO trains on those; play with a policy "
                "that returns them (Sampling(logprobs=True))."
            )
        logps = [0.0] * len(rendered.input_ids)  # no reply at all: nothing to learn
    # A prompt is cut at max_length - max_new_tokens, the whole episode at max_length: a
    # prompt can lose turns that the episode, its last reply short, still holds.
    sampled_cut = t.metadata.get("prompts_cut_by_max_length", 0)
    full = rendered.dropped_turns == 0 and not sampled_cut
    return Episode(rendered.input_ids, rendered.action_mask, logps, advantage, full)


def collate(episodes: Sequence[Episode], device: torch.device) -> dict[str, torch.Tensor]:
    """A right-padded batch: ids and masks (batch, longest), old log-probs likewise, the
    advantages and whether each row kept its whole context (batch,)."""
    batch = pad(episodes)
    old = torch.zeros(batch["input_ids"].shape, dtype=torch.float32)  # (batch, longest)
    for row, e in enumerate(episodes):
        old[row, : len(e.old_logps)] = torch.tensor(e.old_logps, dtype=torch.float32)
    batch["old_logps"] = old
    batch["advantage"] = torch.tensor([e.advantage for e in episodes], dtype=torch.float32)
    batch["full_context"] = torch.tensor([e.full_context for e in episodes])
    return {k: v.to(device) for k, v in batch.items()}


def rollout_stats(
    accelerator: Accelerator,
    played: Sequence[Trajectory],
    rewards: torch.Tensor,
    groups: torch.Tensor,
    samples: int,
) -> dict[str, float]:
    """How the step's episodes went, over all processes: reward mean and std, success rate,
    the share of groups without signal, steps and sampled tokens."""
    n = global_sum(accelerator, len(played))
    total = global_sum(accelerator, float(rewards.sum()))
    squares = global_sum(accelerator, float((rewards**2).sum()))
    mean = total / n
    per_group = rewards.view(-1, samples)  # (groups, samples): check_groups ordered them
    flat = (per_group == per_group[:, :1]).all(dim=1)
    return {
        "reward_mean": mean,
        "reward_std": max(squares / n - mean**2, 0.0) ** 0.5,
        "success_rate": global_sum(accelerator, sum(is_success(t.reward) for t in played)) / n,
        "no_signal": global_sum(accelerator, int(flat.sum())) / (n / samples),
        "episodes": int(n),
        "mean_steps": global_sum(accelerator, sum(t.steps for t in played)) / n,
        "sampled_tokens": int(
            global_sum(
                accelerator, sum(len(turn.token_ids or ()) for t in played for turn in t.turns)
            )
        ),
    }
