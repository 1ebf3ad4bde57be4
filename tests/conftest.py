"""Fixtures shared across the test suite: a nano model made locally on the toy env's corpus."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def nano_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `coevo model init`-style nano checkpoint (tokenizer + random Llama) for the toy env.

    Made once per test session; treat it as read-only (copy it before training in place).
    """
    from coevo.policy.tiny import init_model
    from tests.toy_env import ToyEnv

    out = tmp_path_factory.mktemp("nano_toy")
    init_model(ToyEnv(), "nano", out, seed=0)
    return out
