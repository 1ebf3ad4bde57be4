"""Shared fixtures: one BfclEnv per test session (tests that need the package skip without it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coevo.envs.bfcl import BfclEnv, data
from coevo.trajectory import Task

NEEDS_PACKAGE = "needs the bfcl-eval package (`make` installs it; see coevo.envs.bfcl.data)"


@pytest.fixture(scope="session")
def bfcl_env() -> Iterator[BfclEnv]:
    pytest.importorskip("bfcl_eval", reason=NEEDS_PACKAGE)
    env = BfclEnv()
    yield env
    env.close()


def entry_task(entry_id: str) -> Task:
    """The package's entry `entry_id` (e.g. multi_turn_miss_func_0) as a task."""
    category = entry_id.removeprefix("multi_turn_").rsplit("_", 1)[0]
    entry = next(e for e in data.load_entries(category) if e["entry_id"] == entry_id)
    return data.task_of(entry, "train")
