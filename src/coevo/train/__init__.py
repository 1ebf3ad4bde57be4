"""Trainers: SFT on the agent's tokens, weighted multi-turn DPO, multi-turn GRPO; on accelerate.

`losses` holds the pure tensor functions, `batches` the examples and padding, `sft` / `dpo` /
`grpo` the three loops with their configs (`episodes`: what GRPO plays and trains on);
`settings` the setting groups every trainer config nests (optimiser, LoRA, checkpoints,
compute), and `model` and `loop` the parts the loops share.
"""

from __future__ import annotations

from coevo.train.batches import DpoExample, Tokens, dpo_examples, lm_examples, sft_examples
from coevo.train.dpo import DpoConfig, train_dpo
from coevo.train.groups import Player
from coevo.train.grpo import GrpoConfig, train_grpo
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
    "GrpoConfig",
    "GrpoLoss",
    "Lora",
    "Optim",
    "Player",
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
    "train_grpo",
    "train_sft",
]
