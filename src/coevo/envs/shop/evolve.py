"""The shop's side of agent-data co-evolution: action patterns, the actions valid on the page
shown (for the explorers without a model), and goals made from what an explorer bought
(through the instruction maker the task generator uses). `ShopEnv`'s methods of the same names
(`coevo.envs.evolve`'s capabilities) call these with the env's catalog and page."""

from __future__ import annotations

import random
import re

from coevo.envs.evolve import Candidate
from coevo.envs.react import format_reply
from coevo.envs.shop.catalog import Catalog
from coevo.envs.shop.goals import goal_data, instruction_text, price_upper
from coevo.envs.shop.pages import BACK, BUY, NEXT, PREV, SUB_PAGES, Page, parse_action
from coevo.trajectory import Task, Trajectory

_ASIN = re.compile(r"^[A-Z0-9]{10}$")
_CLICKS = {BACK: "back", NEXT: "next", PREV: "prev", BUY: "buy"}
_WHY = {
    "item": "I open {label} to see its options.",
    "option": "I choose {label}.",
    "buy": "I buy this product with the options chosen.",
    "sub": "I read the {label} of this product.",
}
_searches: dict[str, tuple[str, ...]] = {}


def action_pattern(action: str) -> str:
    """The verb and the kind of page element: `search`, `click:item`, `click:option`,
    `click:next`, `click:buy`, `click:description`, ... (`invalid` when it does not parse)."""
    act = parse_action(action)
    if isinstance(act, str):
        return "invalid"
    if act.verb == "search":
        return "search"
    label = " ".join(act.arg.split()).lower()
    if label in _CLICKS:
        return f"click:{_CLICKS[label]}"
    if label in SUB_PAGES:
        return f"click:{label}"
    if _ASIN.match(act.arg.strip()):
        return "click:item"
    return "click:option"


def valid_actions(page: Page, catalog: Catalog) -> list[str]:
    """On the search page, searches built from the catalog's words (`searches`); on any other
    page, a click on each label it shows."""
    if page.name == "search":
        return [format_reply(f"I search for {q}.", f"search[{q}]") for q in searches(catalog)]
    return [
        format_reply(_WHY.get(target[0], "I click {label}.").format(label=label), f"click[{label}]")
        for label, target in page.clickables.items()
        if not set(label) & set("[]\n")  # a bracket in a label would end the action early
    ]


def searches(catalog: Catalog) -> tuple[str, ...]:
    """Every product type of the catalog, alone and after each attribute its products have
    (`stainless steel tea kettle`): searches that find products, in a fixed order."""
    key = str(catalog.path.resolve())
    if key not in _searches:
        made: list[str] = []
        for query, ids in sorted(catalog.ids_by_query().items()):
            attributes = sorted({a for pid in ids for a in catalog.product(pid).attributes})
            made += [query, *(f"{a} {query}" for a in attributes)]
        _searches[key] = tuple(dict.fromkeys(q for q in made if q.strip()))
    return _searches[key]


def tasks_from_exploration(catalog: Catalog, trajectory: Trajectory) -> list[Candidate]:
    """The bought product with the options the explorer chose, as a goal (none without a
    purchase). Attributes and the price bound are drawn as the generator draws them, seeded by
    the exploration so a rerun makes the same goal."""
    info = trajectory.metadata.get("info") or {}
    asin, chosen = info.get("asin"), info.get("chosen")
    if not isinstance(asin, str) or not isinstance(chosen, dict):
        return []
    pid = catalog.id_of(asin)
    if pid is None:
        return []
    product = catalog.product(pid)
    groups = {str(g): str(v) for g, v in chosen.items() if any(g == n for n, _ in product.options)}
    rng = random.Random(f"shop-synth-{trajectory.task.id}-{trajectory.sample}")
    k = min(len(product.attributes), rng.choice((1, 2, 2, 3)))
    attributes = rng.sample(list(product.attributes), k)
    upper = price_upper(product.price, rng)
    instruction = instruction_text(product.query, attributes, groups, upper, rng)
    goal = goal_data(product, attributes, list(groups.values()), groups, upper, instruction)
    data = {k: v for k, v in goal.items() if k != "instruction"}
    task = Task("shop/synth", "shop", "train", instruction, data)
    return [Candidate(task, {"asin": asin, "chosen": groups})]


def task_key(task: Task) -> str:
    """A goal is its target product: strict on purpose, so no synthesized task targets a
    product a test goal targets, whatever options either names."""
    return f"asin:{task.data.get('asin')}"
