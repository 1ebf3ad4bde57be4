"""Shared fixtures: one generated data set per test session, in a temporary cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevo.envs.sql import SqlEnv
from coevo.envs.sql.generator import ensure_generated


@pytest.fixture(scope="session")
def sql_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql-cache")
    ensure_generated(0, root)
    return root


@pytest.fixture(scope="session")
def sql_env(sql_cache: Path):
    env = SqlEnv(cache_dir=sql_cache)
    yield env
    env.close()
