"""Loader for the original WebShop data files (the `data/` folder of the WebShop repository).

Layout read (DIR or DIR/data):

- `items_shuffle.json` (or `items_shuffle_1000.json`), required: a list of products with
  `asin`, `name`, `category`, `query`, `product_category`, `pricing` ("$12.99", or a range
  "$8.99 - $19.99"), `customization_options` ({option name: [{"value": ...}, ...]}),
  `small_description` (bullet points), `full_description`.
- `items_ins_v2.json` (or `items_ins_v2_1000.json`): {asin: {"attributes": [...],
  "instruction": ..., "instruction_attributes": [...]}}, the products' attributes (and
  WebShop's synthetic instructions).
- `items_human_ins.json`: {asin: [{"instruction", "instruction_attributes",
  "instruction_options"}, ...]}, the human instructions: the goals. Without it, goals are made
  from the synthetic instructions with one seeded option combination each, their options a
  mapping (name -> value) as in WebShop, which the reward matches as (name, value) pairs.
- `reviews.json` (optional): [{"asin", "reviews": [{"score", "title", "body"}],
  "average_rating"}].

Conversions follow WebShop's own loader: option names and values lower-cased, "/" in values
read as " | ", products with a bad or repeated ASIN skipped, a price range priced at a seeded
uniform draw inside it, goals without attributes skipped, WebShop's price rule for
`price_upper` (unless a goal gives one). Goals whose own target cannot score 1.0 (their
options are not among the product's) are left out, and the count is logged.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
from pathlib import Path
from typing import Any

from coevo.envs.base import EnvError
from coevo.envs.shop.catalog import Product
from coevo.envs.shop.expert import pick_options
from coevo.envs.shop.goals import goal_data, price_text, price_upper
from coevo.envs.shop.reward import score

log = logging.getLogger(__name__)

PRODUCT_FILES = ("items_shuffle.json", "items_shuffle_1000.json")
ATTRIBUTE_FILES = ("items_ins_v2.json", "items_ins_v2_1000.json")
HUMAN_FILE = "items_human_ins.json"
REVIEW_FILE = "reviews.json"
_NOT_PRICE = re.compile(r"[^\d.]")


def _first(folder: Path, names: tuple[str, ...]) -> Path | None:
    for name in names:
        for base in (folder, folder / "data"):
            if (base / name).is_file():
                return base / name
    return None


def find_files(data: Path) -> tuple[Path, Path | None, Path | None, Path | None]:
    """(products, attributes, human instructions, reviews) files of a WebShop data folder."""
    if not data.is_dir():
        raise EnvError(f"WebShop data folder {str(data)!r} does not exist or is not a folder.")
    products = _first(data, PRODUCT_FILES)
    if products is None:
        raise EnvError(
            f"No WebShop products file in {str(data)!r}: expected {' or '.join(PRODUCT_FILES)} "
            "(from the data/ folder of the WebShop repository)."
        )
    return (
        products,
        _first(data, ATTRIBUTE_FILES),
        _first(data, (HUMAN_FILE,)),
        _first(data, (REVIEW_FILE,)),
    )


def _read(path: Path | None, default: Any) -> Any:
    if path is None:
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EnvError(f"Cannot read WebShop file {str(path)!r}: {exc}.") from exc


def parse_pricing(pricing: Any) -> list[float]:
    """WebShop's price parsing: "$a" -> [a]; "$a - $b" -> [a, b]; missing -> [100.0]."""
    if isinstance(pricing, list | tuple):
        values = [float(p) for p in pricing]
    elif isinstance(pricing, int | float):
        values = [float(pricing)]
    else:
        values = []
        for part in str(pricing or "").split("$")[1:]:
            digits = _NOT_PRICE.sub("", part)
            if digits:
                try:
                    values.append(float(digits))
                except ValueError:
                    continue
    return values[:2] or [100.0]


def _options(raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    groups = []
    for name, contents in (raw or {}).items():
        if not contents:
            continue
        values = []
        for content in contents:
            value = content.get("value") if isinstance(content, dict) else content
            if value is not None:
                value = str(value).strip().replace("/", " | ").lower()
                if value and value not in values:
                    values.append(value)
        if values:
            groups.append((str(name).lower(), tuple(values)))
    return tuple(groups)


def _product(raw: dict[str, Any], attrs: dict, reviews: dict, rng: random.Random) -> Product:
    asin = str(raw["asin"])
    pricing = parse_pricing(raw.get("pricing"))
    price = pricing[0] if len(pricing) == 1 else rng.uniform(pricing[0], pricing[1])
    tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
    bullets = raw.get("small_description") or []
    review = reviews.get(asin, {})
    return Product(
        asin=asin,
        title=str(raw.get("name") or ""),
        query=str(raw.get("query") or "").lower().strip(),
        category=str(raw.get("category") or ""),
        product_category=str(raw.get("product_category") or ""),
        price=float(price),
        price_tag=tag,
        attributes=tuple(str(a) for a in (attrs.get(asin, {}).get("attributes") or [])),
        options=_options(raw.get("customization_options")),
        bullets=tuple(str(b) for b in (bullets if isinstance(bullets, list) else [bullets])),
        description=str(raw.get("full_description") or ""),
        reviews=tuple(
            (
                float(r.get("score", r.get("stars", 0)) or 0),
                str(r.get("title") or ""),
                str(r.get("body", r.get("review")) or ""),
            )
            for r in review.get("reviews") or []
        ),
        rating=str(review.get("average_rating", "N.A.")),
    )


def _goal(product: Product, ins: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    attributes = [str(a) for a in ins.get("instruction_attributes") or []]
    if not attributes:
        return None  # WebShop skips goals without attributes
    raw_options = ins.get("instruction_options") or []
    groups = (
        {str(k): str(v) for k, v in raw_options.items()} if isinstance(raw_options, dict) else {}
    )
    # WebShop keeps a synthetic goal's options as a mapping, matched as (name, value) pairs.
    options = groups if groups else [str(o) for o in raw_options]
    upper = ins.get("price_upper")
    upper = float(upper) if upper is not None else price_upper(product.price, rng)
    instruction = str(ins.get("instruction") or "").strip().strip(".") + price_text(upper)
    return goal_data(product, attributes, options, groups, upper, instruction)


def _synthetic(product: Product, ins: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """WebShop's synthetic instruction with one option combination (WebShop enumerates all)."""
    groups = {name: rng.choice(values) for name, values in product.options}
    text = str(ins.get("instruction") or "").strip().strip(".")
    if groups:
        text += " with " + ", and ".join(f"{k}: {v}" for k, v in groups.items())
    return {**ins, "instruction": text, "instruction_options": groups}


def load_webshop(data: Path, seed: int = 0) -> tuple[list[Product], list[dict[str, Any]]]:
    """Products and goals of a WebShop data folder (see the module docstring)."""
    products_file, attrs_file, human_file, reviews_file = find_files(data)
    raw_products = _read(products_file, [])
    attrs = _read(attrs_file, {})
    human = _read(human_file, None)
    reviews = {str(r.get("asin")): r for r in _read(reviews_file, [])}
    if human is None and not attrs:
        raise EnvError(
            f"No WebShop goals in {str(data)!r}: add {HUMAN_FILE} (human instructions) or "
            f"{' or '.join(ATTRIBUTE_FILES)} (synthetic instructions)."
        )
    rng = random.Random(f"webshop-{seed}")
    products: list[Product] = []
    seen: set[str] = set()
    for raw in raw_products:
        asin = str(raw.get("asin", "nan"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(_product(raw, attrs, reviews, rng))
    goals, skipped = [], 0
    for product in products:
        if human is not None:
            instructions = human.get(product.asin) or []
        elif attrs.get(product.asin, {}).get("instruction"):
            instructions = [_synthetic(product, attrs[product.asin], rng)]
        else:
            instructions = []
        for ins in instructions:
            goal = _goal(product, ins, rng)
            if goal is None:
                continue
            best = score(product, goal, pick_options(product, goal["goal_options"]))
            if not math.isclose(best.reward, 1.0):
                skipped += 1
                continue
            goals.append(goal)
    if skipped:
        log.warning("%d WebShop goals left out: their own product cannot score 1.0.", skipped)
    if not goals:
        raise EnvError(f"The WebShop data in {str(data)!r} gives no usable goals.")
    return products, goals
