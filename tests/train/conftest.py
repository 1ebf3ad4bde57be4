"""Tiny random Llama models and random token data for the trainer tests (no tokenizer needed)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

from coevo.train.batches import DpoExample, Tokens

VOCAB = 300
EXACT = "cpu"
"""The trainer device of a test that compares exact numbers: the CPU in float32 wherever the
suite runs (on a GPU, `auto` trains there in bf16). Tests of behaviour run where `auto` puts
them and compare `cpu_state` snapshots."""


def cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of `model`'s weights on the CPU, whatever device a trainer moved it to."""
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def tiny_llama(seed: int = 0, kv_heads: int = 4, attn: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        intermediate_size=128,
        vocab_size=VOCAB,
        max_position_embeddings=256,
        attn_implementation=attn,
    )
    return LlamaForCausalLM(config)


def random_seq(rng: random.Random, low: int = 10, high: int = 40) -> Tokens:
    """A sequence with a user-like prefix (mask 0) and agent/observation spans."""
    n = rng.randint(low, high)
    ids = tuple(rng.randrange(VOCAB) for _ in range(n))
    mask = tuple(0 if i < 4 else int(rng.random() < 0.5) for i in range(n))
    if not any(mask[1:]):
        mask = (*mask[:-1], 1)
    return Tokens(ids, mask)


@pytest.fixture
def model_factory() -> Callable[..., torch.nn.Module]:
    return tiny_llama


@pytest.fixture
def sft_data() -> list[Tokens]:
    rng = random.Random(1)
    return [random_seq(rng) for _ in range(24)]


@pytest.fixture
def dpo_data() -> list[DpoExample]:
    rng = random.Random(2)
    return [
        DpoExample(
            random_seq(rng),
            random_seq(rng),
            weight=rng.choice([0.5, 1.0]),
            sft_weight=rng.choice([0.0, 0.1]),
        )
        for _ in range(16)
    ]
