"""WebShop's purchase reward (its `get_reward`), with a documented substitute for its noun tagger.

    reward = type_score * (matched attributes + matched options + price_ok)
                        / (n_goal_attributes + n_goal_options + 1)

- price_ok: the product's price <= the goal's upper bound.
- attribute matched: some product attribute has token-set ratio > 85 with it, or the attribute
  text occurs in the lower-cased title, bullet points or description.
- option matched: some purchased option value has token-set ratio > 85 with it, both sides first
  mapped to a canonical colour word when they contain one. Goal options come as WebShop gives
  them: a list of values (human goals) or a mapping name -> value (synthetic goals), whose
  (name, value) pairs are matched whole, so the option name takes part in the fuzzy match.
- type_score: 1.0; 0.5 unless the query fields are equal, the category paths share >= 2
  segments or title_score > 0.2; then 0.1 if title_score < 0.1; 0.0 if title_score == 0.
  title_score = |set(goal name nouns) & set(product name nouns)| / len(goal name nouns), or 0.2
  when the goal name has no nouns.

Fuzzy ratios are thefuzz's (WebShop's library) computed with rapidfuzz: the text of each side
(`str()`, so a pair reads "('size', 'large')") loses the characters U+0080-U+00FF, then
rapidfuzz's `default_process` (lower case, non-alphanumerics to spaces), and the ratio is
rounded to an integer before the `> 85` test. WebShop tags nouns with spaCy's
`en_core_web_lg`, which no package registry ships. The substitute, `nouns()`: every alphabetic
word of two or more letters that is not a function word, a number word or one of a short list
of frequent product adjectives; docs/envs.md gives its measured distance from spaCy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from coevo.envs.shop.catalog import Product

FUZZY_THRESHOLD = 85
"""A fuzzy match needs a token-set ratio strictly above this."""

# WebShop's canonical colour words, in its (alphabetical) order: a value containing one (as a
# substring) is read as the first one found, so "navy blue" reads as "blue" and "rose gold" as
# "gold", as in WebShop.
_COLOR_TEXT = """
    alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown
    burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee
    cognac copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia
    gold granite grape graphite grass gray green grey heather indigo ivory ivy khaki lavender
    lemon leopard light lilac lime magenta maroon mauve merlot midnight mint mocha multicolor
    mushroom mustard natural navy nude olive orange peach pewter pink plum purple rainbow red
    rose royal rust sand sapphire seashell silver skull slate steel stone stonewash sunflower
    tan taupe teal tiger turquoise violet walnut wheat white wine yellow"""
COLORS: tuple[str, ...] = tuple(_COLOR_TEXT.split())

_FUNCTION_TEXT = """
    a about above after against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each either et
    every few for from further had has have having he her here hers him his how if in into is
    it its itself just may me might more most much must my neither no nor not of off on once
    only or other our ours out over own per same she should so some such than that the their
    theirs them then there these they this those through to too under until up upon us very
    via was we were what when where which while who whom why will with within without would
    you your yours de la le du des el los one two three four five six seven eight nine ten
    eleven twelve first second third"""
_ADJECTIVE_TEXT = """
    new best great good premium classic modern vintage small medium large big extra mini
    little long short tall wide high low soft hard light heavy thin thick slim ultra super
    deluxe original natural pure real true perfect ideal easy quick fast slow hot cold warm
    cool dry wet clean fresh free full half multi double single triple portable durable
    comfortable adjustable compatible reusable washable waterproof lightweight breathable
    stylish cute beautiful elegant simple basic pro plus max ultimate professional"""
_NOT_NOUNS = frozenset(_FUNCTION_TEXT.split()) | frozenset(_ADJECTIVE_TEXT.split())
_WORD = re.compile(r"[^\W\d_]+")


@lru_cache(maxsize=65_536)
def nouns(name: str) -> tuple[str, ...]:
    """The noun-tagger substitute: the words of a product name taken as nouns (lower case)."""
    return tuple(w for w in _WORD.findall(name.lower()) if len(w) >= 2 and w not in _NOT_NOUNS)


GoalOption = str | tuple[str, str]
"""A goal option: a value, or a (name, value) pair when the goal gives its options as a mapping."""


@lru_cache(maxsize=65_536)
def normalize_color(value: GoalOption) -> GoalOption:
    """The first canonical colour contained in `value`, else `value` unchanged.

    As in WebShop, "contained" is `in`: a substring of a value, but an *element* of a pair, so
    ("color", "navy") reads as "navy" while ("color", "navy blue") stays a pair.
    """
    for color in COLORS:
        if color in value:
            return color
    return value


# thefuzz's `force_ascii` removes exactly these code points (Latin-1's upper half), not all of
# non-ASCII: "crème" becomes "crme", while a CJK character stays.
_LATIN1_UPPER = dict.fromkeys(range(128, 256))


def fuzzy_ratio(a: GoalOption, b: GoalOption) -> int:
    """thefuzz's `token_set_ratio(a, b)`: its pre-processing, then rounded to an integer."""
    processed = [default_process(str(x).translate(_LATIN1_UPPER)) for x in (a, b)]
    # Python's round, as thefuzz's int(round(...)): 85.185 -> 85, which is not > 85.
    return round(fuzz.token_set_ratio(*processed))


def fuzzy_match(a: GoalOption, b: GoalOption) -> bool:
    """WebShop's fuzzy test: thefuzz's token-set ratio above 85."""
    return fuzzy_ratio(a, b) > FUZZY_THRESHOLD


def type_score(product: Product, goal: Mapping[str, Any]) -> tuple[float, bool, bool, float]:
    """(type_score, query_match, category_match, title_score) of a product for a goal."""
    query_match = product.query == goal["query"]
    bought = {s.strip() for s in product.product_category.split("›")}
    wanted = {s.strip() for s in str(goal["product_category"]).split("›")}
    category_match = len(bought & wanted) >= 2
    goal_nouns = nouns(str(goal["name"]))
    if goal_nouns:
        title_score = len(set(nouns(product.title)) & set(goal_nouns)) / len(goal_nouns)
    else:
        title_score = 0.2
    score = 1.0
    if not (query_match or category_match or title_score > 0.2):
        score = 0.5
    if title_score < 0.1:
        score = 0.1
    if title_score == 0.0:
        score = 0.0
    return score, query_match, category_match, title_score


def attribute_matched(product: Product, attribute: str) -> bool:
    """Whether a goal attribute counts as present on the product."""
    if any(fuzzy_match(a, attribute) for a in product.attributes):
        return True
    return (
        attribute in product.title.lower()
        or attribute in " ".join(product.bullets).lower()
        or attribute in product.description.lower()
    )


def option_matched(purchased: Sequence[str], goal_option: GoalOption) -> bool:
    """Whether some purchased option value matches a goal option (colours canonicalised)."""
    wanted = normalize_color(goal_option)
    return any(fuzzy_match(normalize_color(v), wanted) for v in purchased)


def goal_option_items(goal_options: Mapping[str, str] | Sequence[str]) -> list[GoalOption]:
    """The goal options as WebShop matches them: a list's values, a mapping's (name, value)s."""
    if isinstance(goal_options, Mapping):
        return [(str(k), str(v)) for k, v in goal_options.items()]
    return [str(o) for o in goal_options]


@dataclass(frozen=True)
class RewardBreakdown:
    """A purchase's reward and every part of it, so a user can see why it scored what it did."""

    reward: float
    type_score: float
    query_match: bool
    category_match: bool
    title_score: float
    attributes: tuple[tuple[str, bool], ...]
    """(goal attribute, matched) in goal order."""
    options: tuple[tuple[str, bool], ...]
    """(goal option, matched) in goal order; a (name, value) option reads "name: value"."""
    price: float
    price_upper: float
    price_ok: bool

    def to_info(self) -> dict[str, Any]:
        return {
            "reward": self.reward,
            "type_score": self.type_score,
            "query_match": self.query_match,
            "category_match": self.category_match,
            "title_score": self.title_score,
            "attributes": {a: m for a, m in self.attributes},
            "options": {o: m for o, m in self.options},
            "price": self.price,
            "price_upper": self.price_upper,
            "price_ok": self.price_ok,
        }


def score(product: Product, goal: Mapping[str, Any], chosen: Mapping[str, str]) -> RewardBreakdown:
    """The reward of buying `product` with options `chosen` (group -> value) for `goal`.

    `goal` holds `query`, `product_category`, `name` (the target's title), `attributes`,
    `goal_options` (a list of values, or a mapping name -> value as WebShop's synthetic goals
    have) and `price_upper`, as a shop Task's `data` does.
    """
    r_type, query_match, category_match, title_score = type_score(product, goal)
    attributes = tuple((a, attribute_matched(product, a)) for a in goal["attributes"])
    purchased = list(chosen.values())
    options = tuple(
        (o if isinstance(o, str) else f"{o[0]}: {o[1]}", option_matched(purchased, o))
        for o in goal_option_items(goal["goal_options"])
    )
    price_upper = float(goal["price_upper"])
    price_ok = product.price <= price_upper
    hits = sum(m for _, m in attributes) + sum(m for _, m in options) + int(price_ok)
    total = len(attributes) + len(options) + 1
    return RewardBreakdown(
        reward=r_type * hits / total,
        type_score=r_type,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
        attributes=attributes,
        options=options,
        price=product.price,
        price_upper=price_upper,
        price_ok=price_ok,
    )
