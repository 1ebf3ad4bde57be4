"""WebShop's reward on hand-made products, each case worked out by hand in its comment."""

from __future__ import annotations

import pytest

from coevo.envs.shop.catalog import Product
from coevo.envs.shop.reward import normalize_color, nouns, score

PATH = "Clothing, Shoes & Jewelry › Shoes › Hiking Boots"
BOOTS = Product(
    asin="B000000001",
    title="Acme Waterproof Hiking Boots, Trail Shoes",
    query="hiking boots",
    category="fashion",
    product_category=PATH,
    price=40.0,
    price_tag="$40.00",
    attributes=("waterproof", "slip resistant"),
    options=(("color", ("navy blue", "black")), ("size", ("large", "x-large"))),
    bullets=("Lace up closure",),
    description="Made with a cushioned sole.",
    reviews=(),
    rating="N.A.",
)


def goal(**changes):
    base = {
        "query": "hiking boots",
        "product_category": PATH,
        "name": BOOTS.title,
        "attributes": ["waterproof"],
        "goal_options": ["black"],
        "price_upper": 50.0,
    }
    return {**base, **changes}


def test_noun_substitute_on_the_product_title():
    # "waterproof" is in the adjective list; the rest are nouns; "," is no word.
    assert nouns(BOOTS.title) == ("acme", "hiking", "boots", "trail", "shoes")
    assert nouns("The Best New") == ()


def test_colour_normalisation_takes_the_first_colour_word_alphabetically():
    assert normalize_color("navy blue") == "blue"  # "blue" comes before "navy"
    assert normalize_color("rose gold") == "gold"
    assert normalize_color("x-large") == "x-large"


CASES = [
    # 1. Everything matches: type 1.0 (query equal, title_score 5/5 = 1);
    #    (1 attribute + 1 option + price) / (1 + 1 + 1) = 3/3.
    ("all match", goal(), {"color": "black"}, 1.0),
    # 2. No option chosen: (1 + 0 + 1) / 3 = 0.6667.
    ("option not chosen", goal(), {}, 2 / 3),
    # 3. Price 40 above the bound 30: (1 + 1 + 0) / 3.
    ("price too high", goal(price_upper=30.0), {"color": "black"}, 2 / 3),
    # 4. Price equal to the bound is fine (<=): 3/3.
    ("price at the bound", goal(price_upper=40.0), {"color": "black"}, 1.0),
    # 5. Attributes found in the text: "cushioned sole" in the description, "lace up closure"
    #    in the bullets, "machine wash" nowhere; no goal options: (2 + 0 + 1) / (3 + 0 + 1).
    (
        "attributes in text",
        goal(attributes=["cushioned sole", "lace up closure", "machine wash"], goal_options=[]),
        {},
        3 / 4,
    ),
    # 6. Colour canonicalised on both sides: "navy blue" -> "blue" = "blue": 3/3.
    ("colour word", goal(goal_options=["blue"]), {"color": "navy blue"}, 1.0),
    # 7. ... and its quirk: goal "navy" stays "navy", the bought "navy blue" becomes "blue";
    #    token-set ratio("navy", "blue") is far below 85: (1 + 0 + 1) / 3.
    ("colour quirk", goal(goal_options=["navy"]), {"color": "navy blue"}, 2 / 3),
    # 8. Token-set quirk: "x-large" -> tokens {x, large}, a superset of {large}: ratio 100.
    #    Goal attributes: "waterproof" yes, "leather upper" nowhere; options "black" yes,
    #    "x-large" matched by the bought "large": (1 + 2 + 1) / (2 + 2 + 1) = 0.8.
    (
        "token set",
        goal(attributes=["waterproof", "leather upper"], goal_options=["black", "x-large"]),
        {"color": "black", "size": "large"},
        4 / 5,
    ),
    # 9. Wrong type: query differs, paths share one segment, goal nouns {zed, trail, running,
    #    jacket, coat, vest, shell, layer, gear}, one shared ("trail"): title 1/9 = 0.111,
    #    not > 0.2 and not < 0.1 -> type 0.5; (1 + 0 + 1) / (1 + 0 + 1) * 0.5.
    (
        "type half",
        goal(
            query="rain jacket",
            product_category="Clothing, Shoes & Jewelry › Clothing › Rain Jacket",
            name="Zed Trail Running Jacket Coat Vest Shell Layer Gear",
            goal_options=[],
        ),
        {},
        0.5,
    ),
    # 10. Same path segments >= 2 rescue a weak title: nouns {zed, sprint, racer, mesh,
    #     sneaker, shoes}, one shared: 1/6 = 0.167 -> category match -> type 1.0; 3/3.
    (
        "category rescues",
        goal(
            query="running shoes",
            product_category="Clothing, Shoes & Jewelry › Shoes › Running Shoes",
            name="Zed Sprint Racer Mesh Sneaker Shoes",
        ),
        {"color": "black"},
        1.0,
    ),
    # 11. Title score below 0.1 wins over a query match: 11 nouns, one shared ("trail"):
    #     1/11 = 0.091 < 0.1 -> type 0.1; (1 + 1 + 1) / 3 * 0.1.
    (
        "type tenth",
        goal(name="Zed Trail Alpha Beta Gamma Delta Epsilon Zeta Theta Iota Kappa"),
        {"color": "black"},
        0.1,
    ),
    # 12. No shared noun at all -> title 0 -> type 0.0, whatever else matches.
    ("type zero", goal(name="Velvet Sofa Cushion"), {"color": "black"}, 0.0),
    # 13. A goal name without nouns scores title 0.2 (not > 0.2): with neither query nor
    #     category equal, type 0.5; (1 + 0 + 1) / 2 * 0.5.
    (
        "no nouns",
        goal(
            query="sofa",
            product_category="Home & Kitchen › Furniture › Sofas",
            name="The Best New",
            goal_options=[],
        ),
        {},
        0.5,
    ),
    # 14. Wrong colour and price too high: (1 + 0 + 0) / 3.
    ("little matches", goal(price_upper=20.0, goal_options=["brown"]), {"color": "black"}, 1 / 3),
]


@pytest.mark.parametrize(
    ("label", "the_goal", "chosen", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_reward_cases(label, the_goal, chosen, expected):
    assert score(BOOTS, the_goal, chosen).reward == pytest.approx(expected)


def test_breakdown_says_what_matched():
    result = score(
        BOOTS,
        goal(attributes=["waterproof", "leather upper"], goal_options=["black", "brown"]),
        {"color": "black"},
    )
    info = result.to_info()
    assert info["attributes"] == {"waterproof": True, "leather upper": False}
    assert info["options"] == {"black": True, "brown": False}
    assert info["price_ok"] is True and info["price"] == 40.0 and info["price_upper"] == 50.0
    assert info["type_score"] == 1.0 and info["query_match"] is True
    assert info["category_match"] is True and info["title_score"] == 1.0
    assert info["reward"] == pytest.approx(3 / 5)
