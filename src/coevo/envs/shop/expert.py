"""The shop's expert: search, page to a product that fully satisfies the goal, pick the goal
options, buy. It checks candidates with the reward function itself, so whatever it buys
scores 1.0 by construction, and it only uses what an agent can see (search results in order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from coevo.envs.base import EnvError
from coevo.envs.react import format_reply
from coevo.envs.shop.catalog import Catalog, Product
from coevo.envs.shop.pages import BUY, NEXT, RESULTS_PER_PAGE
from coevo.envs.shop.reward import fuzzy_match, goal_option_items, normalize_color, score
from coevo.trajectory import Task, Turn


def pick_options(
    product: Product, goal_options: Mapping[str, str] | Sequence[str]
) -> dict[str, str]:
    """The option choices (group -> value) that satisfy the goal options, one value per group:
    an exact value first (in the named group, for a mapping), else a fuzzy match as the reward
    reads it."""
    chosen: dict[str, str] = {}
    for wanted in goal_option_items(goal_options):
        name, value = ("", wanted) if isinstance(wanted, str) else wanted
        exact = sorted(
            ((g, v) for g, vs in product.options for v in vs if v == value),
            key=lambda gv: gv[0] != name,
        )
        fuzzy = [
            (g, v)
            for g, vs in product.options
            for v in vs
            if fuzzy_match(normalize_color(v), normalize_color(wanted))
        ]
        for group, picked in exact or fuzzy:
            if group not in chosen:
                chosen[group] = picked
                break
    return chosen


def search_query(goal: Mapping[str, Any]) -> str:
    """What the expert types: the goal attributes and the product type."""
    return " ".join([*goal["attributes"], str(goal["query"])])


def find_purchase(
    catalog: Catalog, goal: Mapping[str, Any]
) -> tuple[str, tuple[int, ...], int, dict[str, str]] | None:
    """(query, results, position, options) of the first result that scores 1.0, or None."""
    for query in (search_query(goal), str(goal["name"])):
        results = catalog.search(query)
        for position, pid in enumerate(results):
            product = catalog.product(pid)
            chosen = pick_options(product, goal["goal_options"])
            if math.isclose(score(product, goal, chosen).reward, 1.0):
                return query, results, position, chosen
    return None


def expert_turns(catalog: Catalog, task: Task) -> list[Turn]:
    """The expert's replies for `task`, each `Thought: ...\\nAction: ...`."""
    goal = task.data
    found = find_purchase(catalog, goal)
    if found is None:
        raise EnvError(
            f"The shop expert found no product scoring 1.0 for task {task.id!r} (searched "
            f"{search_query(goal)!r} and the target's title)."
        )
    query, results, position, chosen = found
    product = catalog.product(results[position])
    turns = [Turn("assistant", format_reply(f"I search for {goal['query']}.", f"search[{query}]"))]
    for page in range(1, position // RESULTS_PER_PAGE + 1):
        thought = f"No result on page {page} fits; I go to the next page."
        turns.append(Turn("assistant", format_reply(thought, f"click[{NEXT}]")))
    thought = f"{product.asin} looks like the {goal['query']} I want; I open it."
    turns.append(Turn("assistant", format_reply(thought, f"click[{product.asin}]")))
    for group, value in chosen.items():
        turns.append(
            Turn("assistant", format_reply(f"I choose {value} for {group}.", f"click[{value}]"))
        )
    thought = "It matches the instruction and the price; I buy it."
    turns.append(Turn("assistant", format_reply(thought, f"click[{BUY}]")))
    return turns
