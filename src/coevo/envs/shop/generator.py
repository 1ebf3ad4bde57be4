"""A seeded, deterministic product generator: the built-in stand-in for WebShop's scraped data.

`generate_products(n, seed)` yields the same products for the same arguments on every machine
and Python version (one `random.Random(seed)` drives everything; no set or hash order is ever
iterated). Products get a title, a category path, attributes, option groups, a price,
bullet points, a description and reviews, drawn from `vocabulary`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from coevo.envs.shop.catalog import Product
from coevo.envs.shop.vocabulary import (
    BRAND_HEADS,
    BRAND_TAILS,
    OPTION_SETS,
    PRODUCT_TYPES,
    REVIEW_BODIES,
    REVIEW_TITLES,
    TOP_CATEGORIES,
    ProductType,
)

GENERATOR_VERSION = 1
"""Part of the catalog cache key: bump it whenever generated products change."""

_ASIN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_BRANDS_PER_CATEGORY = 12
_BULLET_TEMPLATES = (
    "{A}: designed for everyday use",
    "{A} for comfort and convenience",
    "{A}, as you would expect from {brand}",
    "{A} - tested by our quality team",
)
_DESCRIPTION_CLOSERS = (
    "Backed by a 30-day satisfaction guarantee.",
    "A thoughtful present for friends and family.",
    "Designed in-house and checked before shipping.",
    "Made to be used every day for years.",
)


def headline(text: str) -> str:
    """Capitalise each word's first letter, keeping the rest ("10000mah" stays as it is)."""
    return " ".join(w[:1].upper() + w[1:] if w[:1].isalpha() else w for w in text.split())


def _brands(rng: random.Random) -> dict[str, list[str]]:
    names = [head + tail for head in BRAND_HEADS for tail in BRAND_TAILS]
    rng.shuffle(names)
    return {
        top: names[i * _BRANDS_PER_CATEGORY : (i + 1) * _BRANDS_PER_CATEGORY]
        for i, top in enumerate(TOP_CATEGORIES)
    }


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        code = rng.randrange(36**8)
        tail = []
        for _ in range(8):
            code, digit = divmod(code, 36)
            tail.append(_ASIN_CHARS[digit])
        asin = "B0" + "".join(tail)
        if asin not in taken:
            taken.add(asin)
            return asin


def _options(rng: random.Random, ptype: ProductType) -> tuple[tuple[str, tuple[str, ...]], ...]:
    groups: list[tuple[str, tuple[str, ...]]] = []
    used: set[str] = set()  # option labels must be unique on a page
    for set_name in ptype.option_sets:
        if rng.random() >= 0.85:
            continue
        group, values = OPTION_SETS[set_name]
        k = rng.randint(2, min(6, len(values)))
        picked = sorted(rng.sample(range(len(values)), k))
        chosen = tuple(values[i] for i in picked if values[i] not in used)
        used.update(chosen)
        if chosen:
            groups.append((group, chosen))
    return tuple(groups)


def _price(rng: random.Random, ptype: ProductType) -> float:
    low, high = ptype.price_range
    return float(int(rng.uniform(low, high))) + 0.99


def _reviews(rng: random.Random, ptype: ProductType) -> tuple[tuple[float, str, str], ...]:
    reviews = []
    for _ in range(rng.randint(1, 3)):
        score = rng.choices((5, 4, 3, 2, 1), weights=(5, 4, 2, 1, 1))[0]
        reviews.append(
            (
                float(score),
                rng.choice(REVIEW_TITLES[score]),
                REVIEW_BODIES[score].format(type=ptype.name),
            )
        )
    return tuple(reviews)


def make_product(rng: random.Random, ptype: ProductType, brand: str, asin: str) -> Product:
    """One product of type `ptype`."""
    attributes = tuple(rng.sample(ptype.attributes, rng.randint(2, 4)))
    options = _options(rng, ptype)
    shown = " ".join(headline(a) for a in attributes[: rng.randint(1, 2)])
    title = f"{brand} {shown} {headline(ptype.name)}"
    if rng.random() < 0.7:
        title += f", {headline(rng.choice(ptype.aliases))}"
    bullets = [
        rng.choice(_BULLET_TEMPLATES).format(A=a[:1].upper() + a[1:], brand=brand)
        for a in attributes
    ]
    for group, values in options:
        bullets.append(f"Available in {len(values)} {group} choices")
    bullets.append(f"Package includes 1 {ptype.name} from {brand}")
    description = (
        f"The {brand} {ptype.name} is {' and '.join(attributes[:2])}. "
        f"{rng.choice(_DESCRIPTION_CLOSERS)}"
    )
    reviews = _reviews(rng, ptype)
    price = _price(rng, ptype)
    return Product(
        asin=asin,
        title=title,
        query=ptype.name,
        category=ptype.top,
        product_category=ptype.category_path,
        price=price,
        price_tag=f"${price:.2f}",
        attributes=attributes,
        options=options,
        bullets=tuple(bullets),
        description=description,
        reviews=reviews,
        rating=f"{sum(r[0] for r in reviews) / len(reviews):.1f}",
    )


def generate_products(n: int, seed: int = 0) -> Iterator[Product]:
    """`n` products, every product type equally often (types shuffled in blocks)."""
    rng = random.Random(seed)
    brands = _brands(rng)
    taken: set[str] = set()
    block: list[ProductType] = []
    for _ in range(n):
        if not block:
            block = list(PRODUCT_TYPES)
            rng.shuffle(block)
        ptype = block.pop()
        yield make_product(rng, ptype, rng.choice(brands[ptype.top]), _asin(rng, taken))
