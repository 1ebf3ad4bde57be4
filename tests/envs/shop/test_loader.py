"""The loader for WebShop's own data files, on a small sample written in their layout."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from coevo.envs.base import EnvError
from coevo.envs.check import check_env
from coevo.envs.shop import ShopEnv
from coevo.envs.shop.goals import NO_PRICE_LIMIT, PRICE_GRID
from coevo.envs.shop.loader import load_webshop, parse_pricing

TYPES = {
    "hair dryer": (
        "Beauty & Personal Care › Hair Care › Hair Dryers",
        "beauty",
        ["ionic", "fast drying"],
    ),
    "running shoes": (
        "Clothing, Shoes & Jewelry › Men › Shoes › Running",
        "fashion",
        ["arch support", "breathable"],
    ),
    "coffee beans": (
        "Grocery & Gourmet Food › Coffee › Whole Bean",
        "food",
        ["organic", "dark roast"],
    ),
    "desk lamp": (
        "Home & Kitchen › Lighting › Desk Lamps",
        "furniture",
        ["dimmable", "usb charging"],
    ),
    "phone case": ("Electronics › Cell Phones › Cases", "electronics", ["shockproof", "slim fit"]),
    "yoga mat": ("Sports & Outdoors › Yoga › Mats", "sports", ["non slip", "extra thick"]),
}


def write_sample(folder):
    """A dozen-odd products, attributes, human instructions and reviews in WebShop's layout."""
    products, attrs, human, reviews = [], {}, {}, []
    n = 0
    for query, (path, category, attributes) in TYPES.items():
        for k in range(3):
            n += 1
            asin = f"B0TEST{n:04d}"
            products.append(
                {
                    "asin": asin,
                    "name": f"Brand{k} {attributes[k % 2].title()} {query.title()} Model {k}",
                    "category": category,
                    "query": query.upper() + " ",  # WebShop lower-cases and strips it
                    "product_category": path,
                    "pricing": "$8.99 - $19.99" if k == 1 else f"${12 + 10 * k}.99",
                    "customization_options": {
                        "Color": [{"value": "Navy/Blue", "image": None}, {"value": "Black"}],
                        "Size": [{"value": "Small"}, {"value": "Large"}],
                    },
                    "small_description": [f"Great {query}", "Ships fast"],
                    "full_description": f"A {query} that is {attributes[0]}.",
                    "images": [""],
                }
            )
            attrs[asin] = {"attributes": attributes, "instruction": f"i want a {query}"}
            human[asin] = [
                {
                    "asin": asin,
                    "instruction": f"i need a {attributes[0]} {query} in navy | blue, size large.",
                    "instruction_attributes": [attributes[0]],
                    "instruction_options": ["navy | blue", "large"],
                },
                {
                    "asin": asin,
                    "instruction": f"a black {query}",
                    "instruction_attributes": [attributes[1]],
                    "instruction_options": ["black"],
                },
                {
                    "asin": asin,
                    "instruction": "no attributes",
                    "instruction_attributes": [],
                    "instruction_options": [],
                },
                {
                    "asin": asin,
                    "instruction": "an option it lacks",
                    "instruction_attributes": [attributes[0]],
                    "instruction_options": ["purple polka dots"],
                },
            ]
            reviews.append(
                {
                    "asin": asin,
                    "reviews": [{"stars": 4, "title": "ok", "review": "fine"}],
                    "average_rating": 4.0,
                }
            )
    products.append({**products[0], "name": "a duplicate"})  # skipped: repeated ASIN
    products.append({**products[1], "asin": "nan"})  # skipped: bad ASIN
    products.append(
        {**products[2], "asin": "B0NOPRICE1", "pricing": "", "customization_options": None}
    )
    human["B0NOPRICE1"] = [{"instruction": "a plain one", "instruction_attributes": ["ionic"]}]
    for name, data in (
        ("items_shuffle_1000.json", products),
        ("items_ins_v2_1000.json", attrs),
        ("items_human_ins.json", human),
        ("reviews.json", reviews),
    ):
        (folder / name).write_text(json.dumps(data))
    return folder


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_sample(tmp_path_factory.mktemp("webshop-data"))


def test_pricing_is_parsed_as_webshop_does():
    assert parse_pricing("$12.99") == [12.99]
    assert parse_pricing("$8.99 - $19.99") == [8.99, 19.99]
    assert parse_pricing("") == [100.0] and parse_pricing(None) == [100.0]
    assert parse_pricing("$1,299.00") == [1299.0]


def test_products_are_converted(sample):
    products, goals = load_webshop(sample, seed=0)
    assert len(products) == 19  # 18 + the one without a price; duplicate and 'nan' skipped
    first = products[0]
    assert first.query == "hair dryer" and first.title.startswith("Brand0")
    assert first.options == (("color", ("navy | blue", "black")), ("size", ("small", "large")))
    assert first.attributes == ("ionic", "fast drying") and first.price == 12.99
    assert first.bullets == ("Great hair dryer", "Ships fast")
    assert first.reviews == ((4.0, "ok", "fine"),) and first.rating == "4.0"
    ranged = products[1]
    assert ranged.price_tag == "$8.99 to $19.99" and 8.99 <= ranged.price <= 19.99
    no_price = products[-1]
    assert no_price.price == 100.0 and no_price.options == ()


def test_goals_have_attributes_options_and_price_upper(sample):
    products, goals = load_webshop(sample, seed=0)
    # per product with options: 2 usable goals; 1 without attributes and 1 whose option is
    # not offered are left out; the option-less product keeps only its option-less goal.
    assert len(goals) == 18 * 2 + 1
    by_asin = {p.asin: p for p in products}
    for goal in goals:
        product = by_asin[goal["asin"]]
        assert goal["attributes"] and goal["name"] == product.title
        above = [p for p in PRICE_GRID if p > product.price][:4]
        assert goal["price_upper"] in above[1:] or goal["price_upper"] == NO_PRICE_LIMIT
        assert goal["instruction"].endswith(f"price lower than {goal['price_upper']:.2f} dollars")
        assert not goal["instruction"].startswith("no attributes")
    assert goals[0]["goal_options"] == ["navy | blue", "large"]


def test_env_on_real_layout_passes_the_checker(sample, tmp_path):
    env = ShopEnv(data=str(sample), cache_dir=tmp_path)
    try:
        sizes = {s: len(env.tasks(s)) for s in ("train", "test_seen", "test_unseen")}
        assert all(sizes.values()) and sum(sizes.values()) <= 37
        unseen = {t.data["query"] for t in env.tasks("test_unseen")}
        seen = {t.data["query"] for s in ("train", "test_seen") for t in env.tasks(s)}
        assert not unseen & seen
        report = check_env(env, tasks_per_split=30)
        assert report.ok, [(r.name, r.problems) for r in report.failures]
        task = env.tasks("train")[0]
        env.reset(task)
        for turn in env.expert(task)[:-1]:
            env.step(turn.text)
        result = env.step("click[buy now]")
        assert math.isclose(result.reward, 1.0)
    finally:
        env.close()


def test_cli_check_with_data(sample, tmp_path):
    from coevo.cli import app

    result = CliRunner().invoke(
        app, ["env", "check", "shop", "--data", str(sample), "-o", f"cache_dir={tmp_path}"]
    )
    assert result.exit_code == 0, result.output
    assert "shop: passed" in result.output


def test_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(EnvError, match="No WebShop products file"):
        ShopEnv(data=str(tmp_path), cache_dir=tmp_path)
    (tmp_path / "items_shuffle.json").write_text("[]")
    with pytest.raises(EnvError, match="No WebShop goals"):
        ShopEnv(data=str(tmp_path), cache_dir=tmp_path)
    with pytest.raises(EnvError, match="does not exist"):
        ShopEnv(data=str(tmp_path / "nowhere"), cache_dir=tmp_path)


def test_synthetic_goals_keep_their_options_as_a_mapping(tmp_path):
    """Without human instructions, goals come from the synthetic ones, options as WebShop keeps
    them: a mapping, matched as (name, value) pairs."""
    folder = write_sample(tmp_path)
    (folder / "items_human_ins.json").unlink()
    attrs_file = folder / "items_ins_v2_1000.json"
    attrs = json.loads(attrs_file.read_text())
    for entry in attrs.values():
        entry["instruction_attributes"] = entry["attributes"][:1]
    attrs_file.write_text(json.dumps(attrs))
    products, goals = load_webshop(folder, seed=0)
    with_options = [g for g in goals if g["goal_options"]]
    assert with_options and all(isinstance(g["goal_options"], dict) for g in with_options)
    first = with_options[0]
    assert set(first["goal_options"]) == {"color", "size"}
    assert first["goal_options"] == first["option_groups"]
    assert first["instruction"].startswith(f"i want a {first['query']} with color: ")
