"""Instructions, the price rule and the splits: sizes, disjointness, determinism."""

from __future__ import annotations

import random

import pytest

from coevo.envs.base import EnvError
from coevo.envs.shop import ShopEnv
from coevo.envs.shop.goals import NO_PRICE_LIMIT, PRICE_GRID, price_upper, unseen_types


def test_price_rule():
    rng = random.Random(0)
    for price in (3.5, 9.99, 10.0, 45.99, 399.0, 975.0):
        grid = [p for p in PRICE_GRID if p > price][:4]  # the four multiples of 10 above
        for _ in range(20):
            upper = price_upper(price, rng)
            assert upper in grid[1:] and upper > price  # the larger of two distinct draws
    assert price_upper(985.0, rng) == NO_PRICE_LIMIT  # only 990 is above: no price limit


def test_split_sizes_and_task_shape(shop):
    sizes = {s: len(shop.tasks(s)) for s in ("train", "test_seen", "test_unseen")}
    assert sizes == {"train": 60, "test_seen": 20, "test_unseen": 20}
    task = shop.tasks("test_seen")[3]
    assert task.id == "shop/test_seen/00003" and task.env == "shop"
    data = task.data
    assert set(data["attributes"]) <= set(
        shop.catalog.product(shop.catalog.id_of(data["asin"])).attributes
    )
    assert data["goal_options"] == list(data["option_groups"].values())
    assert data["query"] in task.instruction
    if data["price_upper"] < NO_PRICE_LIMIT:
        assert task.instruction.endswith(
            f", and price lower than {data['price_upper']:.2f} dollars"
        )
    with pytest.raises(EnvError, match="Unknown split"):
        shop.tasks("dev")


def test_unseen_types_are_really_unseen(shop):
    train = {t.data["query"] for t in shop.tasks("train")}
    seen = {t.data["query"] for t in shop.tasks("test_seen")}
    unseen = {t.data["query"] for t in shop.tasks("test_unseen")}
    assert unseen <= set(unseen_types(shop.seed))
    assert not unseen & (train | seen)
    assert seen <= train | seen and len(unseen_types(0)) == 8
    targets = {s: {t.data["asin"] for t in shop.tasks(s)} for s in ("train", "test_seen")}
    assert not targets["train"] & targets["test_seen"]


def test_default_sizes_and_determinism(shop_cache):
    a = ShopEnv(cache_dir=shop_cache / "a", n_products=2500)
    b = ShopEnv(cache_dir=shop_cache / "b", n_products=2500)
    try:
        sizes = {s: len(a.tasks(s)) for s in ("train", "test_seen", "test_unseen")}
        assert sizes == {"train": 1500, "test_seen": 200, "test_unseen": 200}
        for split in ("train", "test_seen", "test_unseen"):
            assert a.tasks(split) == b.tasks(split)
        task = a.tasks("train")[7]
        assert a.expert(task) == b.expert(task)
    finally:
        a.close()
        b.close()
    other = ShopEnv(cache_dir=shop_cache / "a", n_products=2500, seed=1)
    assert (
        other.tasks("train")[:5]
        != ShopEnv(cache_dir=shop_cache / "a", n_products=2500).tasks("train")[:5]
    )


def test_too_small_a_catalog_is_a_clear_error(tmp_path):
    with pytest.raises(EnvError, match="raise n_products or lower n_train/n_test"):
        ShopEnv(n_products=200, cache_dir=tmp_path).tasks("train")
