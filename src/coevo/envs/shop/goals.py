"""Shopping goals, WebShop style: instructions made from a target product, and the splits.

A goal is a JSON dict (it becomes a Task's `data`): the target's `asin`, `name` (its title),
`query` (its type), `category`, `product_category`, the goal `attributes`, `goal_options` (a
list of option values, as WebShop's human goals have; the loader's synthetic goals have a
mapping name -> value, as WebShop's do), `option_groups` (group -> value, when known) and
`price_upper`. Generated goals list their values, as the human goals the papers evaluate on.

Price rule (WebShop's): take the multiples of ten above the product's price, keep the first
four; with at least two of them, sample two and use the larger as the upper bound and append
", and price lower than X.00 dollars"; otherwise there is no price limit (upper bound 1e6).

Splits: `test_unseen` goals come only from product types that no `train` or `test_seen` goal
uses (one type per top-level category for the generated catalog); `train` and `test_seen`
draw distinct target products from the other types.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from coevo.envs.base import EnvError
from coevo.envs.shop.catalog import Catalog, Product
from coevo.envs.shop.vocabulary import PRODUCT_TYPES

PRICE_GRID: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_LIMIT = 1_000_000.0
_MASS_TEXT = (
    "shampoo,green tea,dark chocolate,trail mix,olive oil,hot sauce,gummy candy,body wash,"
    "eau de parfum,nail polish,face moisturizer,lipstick"
)
_MASS_NOUNS = frozenset(_MASS_TEXT.split(","))
_OPENERS = (
    "i am looking for {art}{attrs} {type}",
    "i need {art}{type} that is {attrs_and}",
    "find me {attrs} {type}",
    "i want to buy {art}{type} which is {attrs_and}",
    "i'm searching for {art}{attrs} {type}",
)


def price_upper(price: float, rng: random.Random) -> float:
    """WebShop's upper bound for a product priced `price` (NO_PRICE_LIMIT when none)."""
    above = [p for p in PRICE_GRID if p > price][:4]
    if len(above) < 2:
        return NO_PRICE_LIMIT
    return max(rng.sample(above, 2))


def price_text(upper: float) -> str:
    return "" if upper >= NO_PRICE_LIMIT else f", and price lower than {upper:.2f} dollars"


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _option_text(groups: dict[str, str], rng: random.Random) -> str:
    if not groups:
        return ""
    if rng.random() < 0.5:  # WebShop's synthetic style
        return " with " + ", and ".join(f"{g}: {v}" for g, v in groups.items())
    parts = []
    for group, value in groups.items():
        if group == "color":
            parts.append(f"{value} color")
        elif group in ("size", "flavor", "scent", "model", "length"):
            parts.append(f"{group} {value}")
        else:
            parts.append(value)
    return " in " + " and ".join(parts)


def instruction_text(
    type_name: str,
    attributes: Sequence[str],
    groups: dict[str, str],
    upper: float,
    rng: random.Random,
) -> str:
    plural = type_name.endswith("s") or type_name in _MASS_NOUNS
    art = "" if plural else ("an " if type_name[0] in "aeiou" else "a ")
    opener = rng.choice(_OPENERS).format(
        art=art, attrs=" ".join(attributes), attrs_and=_and(attributes), type=type_name
    )
    return opener + _option_text(groups, rng) + price_text(upper)


def make_goal(product: Product, rng: random.Random) -> dict[str, Any]:
    """A goal whose target is `product`: 1-3 of its attributes, most of its option groups."""
    k = min(len(product.attributes), rng.choice((1, 2, 2, 3)))
    attributes = rng.sample(product.attributes, k)
    groups = {g: rng.choice(values) for g, values in product.options if rng.random() < 0.8}
    upper = price_upper(product.price, rng)
    instruction = instruction_text(product.query, attributes, groups, upper, rng)
    return goal_data(product, attributes, list(groups.values()), groups, upper, instruction)


def goal_data(
    product: Product,
    attributes: list[str],
    options: list[str] | dict[str, str],
    groups: dict[str, str],
    upper: float,
    instruction: str,
) -> dict[str, Any]:
    """A goal as `Task.data` holds it: the target product's fields and what to match."""
    return {
        "asin": product.asin,
        "name": product.title,
        "query": product.query,
        "category": product.category,
        "product_category": product.product_category,
        "attributes": attributes,
        "goal_options": options,
        "option_groups": groups,
        "price_upper": upper,
        "instruction": instruction,
    }


def unseen_types(seed: int) -> list[str]:
    """The generated catalog's `test_unseen` product types: one per top-level category."""
    rng = random.Random(f"shop-unseen-{seed}")
    by_top: dict[str, list[str]] = {}
    for ptype in PRODUCT_TYPES:
        by_top.setdefault(ptype.top, []).append(ptype.name)
    return sorted(rng.choice(names) for _, names in sorted(by_top.items()))


def generated_splits(
    catalog: Catalog, seed: int, n_train: int, n_test: int
) -> dict[str, list[dict[str, Any]]]:
    """Goals per split for a generated catalog (deterministic in seed and sizes)."""
    unseen = set(unseen_types(seed))
    by_type = catalog.ids_by_query()
    seen_ids = [pid for t in sorted(by_type) if t not in unseen for pid in by_type[t]]
    unseen_ids = [pid for t in sorted(by_type) if t in unseen for pid in by_type[t]]
    rng = random.Random(f"shop-targets-{seed}")
    rng.shuffle(seen_ids)
    rng.shuffle(unseen_ids)
    if n_train + n_test > len(seen_ids) or n_test > len(unseen_ids):
        raise EnvError(
            f"A catalog of {len(catalog)} products has {len(seen_ids)} products of seen types "
            f"and {len(unseen_ids)} of unseen types, too few for n_train={n_train} and "
            f"n_test={n_test} distinct targets: raise n_products or lower n_train/n_test."
        )
    targets = {
        "train": seen_ids[:n_train],
        "test_seen": seen_ids[n_train : n_train + n_test],
        "test_unseen": unseen_ids[:n_test],
    }
    splits = {}
    for split, ids in targets.items():
        goal_rng = random.Random(f"shop-goals-{seed}-{split}")
        splits[split] = [make_goal(catalog.product(pid), goal_rng) for pid in ids]
    return splits


def real_splits(
    goals: Sequence[dict[str, Any]], seed: int, n_train: int, n_test: int
) -> dict[str, list[dict[str, Any]]]:
    """Goals per split for real WebShop data: whole product types (`query`) go to test_unseen.

    With fewer goals than the sizes ask for, each test split gets about a sixth of them.
    """
    rng = random.Random(f"shop-real-splits-{seed}")
    counts: dict[str, int] = {}
    for goal in goals:
        counts[goal["query"]] = counts.get(goal["query"], 0) + 1
    queries = sorted(counts)
    rng.shuffle(queries)
    want = min(n_test, max(1, len(goals) // 6))
    unseen: set[str] = set()
    taken = 0
    for query in queries[:-1]:  # at least one type stays seen
        if taken >= want:
            break
        unseen.add(query)
        taken += counts[query]
    seen = [g for g in goals if g["query"] not in unseen]
    rng.shuffle(seen)
    n_seen_test = min(n_test, max(1, len(seen) // 6))
    return {
        "train": seen[n_seen_test : n_seen_test + n_train],
        "test_seen": seen[:n_seen_test],
        "test_unseen": [g for g in goals if g["query"] in unseen][:n_test],
    }
