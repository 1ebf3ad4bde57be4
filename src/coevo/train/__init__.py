"""Trainers: SFT on the agent's tokens and weighted multi-turn DPO, on accelerate.

`losses` holds the pure tensor functions, `batches` the examples and padding, `sft` / `dpo`
the two loops with their configs; `settings` the setting groups every trainer config nests
(optimiser, LoRA, checkpoints, compute), and `model` and `loop` the parts the loops share.
"""

from __future__ import annotations

from coevo.train.batches import DpoExample, Tokens, dpo_examples, lm_examples, sft_examples
from coevo.train.dpo import DpoConfig, train_dpo
from coevo.train.loop import TrainResult
from coevo.train.losses import (
    DpoLoss,
    GrpoLoss,
    dpo_loss,
    group_advantages,
    grpo_loss,
    sequence_logps,
)
from coevo.train.settings import Checkpoints, Compute, Lora, Optim
from coevo.train.sft import SftConfig, train_sft

__all__ = [
    "Checkpoints",
    "Compute",
    "DpoConfig",
    "DpoExample",
    "DpoLoss",
    "GrpoLoss",
    "Lora",
    "Optim",
    "SftConfig",
    "Tokens",
    "TrainResult",
    "dpo_examples",
    "dpo_loss",
    "group_advantages",
    "grpo_loss",
    "lm_examples",
    "sequence_logps",
    "sft_examples",
    "train_dpo",
    "train_sft",
]
