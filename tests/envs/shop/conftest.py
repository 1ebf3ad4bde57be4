"""Small shop catalogs built once per test session, in a temporary cache directory."""

from __future__ import annotations

import pytest

from coevo.envs.shop import ShopEnv

SMALL = {"n_products": 1500, "n_train": 60, "n_test": 20}


@pytest.fixture(scope="session")
def shop_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("shop-cache")


@pytest.fixture(scope="session")
def shop(shop_cache):
    env = ShopEnv(cache_dir=shop_cache, **SMALL)
    yield env
    env.close()
