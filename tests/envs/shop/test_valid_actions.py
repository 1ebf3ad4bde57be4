"""The shop's valid actions, what the explorers without a model choose from: searches built
from the catalog's words on the search page, a click on each label of any other page."""

from __future__ import annotations

from coevo.envs.evolve import valid_actions
from coevo.envs.react import parse
from coevo.envs.shop.evolve import searches
from coevo.envs.shop.pages import BUY


def actions(env) -> list[str]:
    return [parse(reply).action for reply in valid_actions(env)]


def test_the_search_page_offers_searches_made_of_catalog_words(shop):
    shop.reset(shop.tasks("train")[0])
    offered = actions(shop)
    made = searches(shop.catalog)
    assert offered == [f"search[{q}]" for q in made]
    types = set(shop.catalog.ids_by_query())
    assert types <= set(made)  # every product type, and types after an attribute
    assert all(q in types or any(q.endswith(" " + t) for t in types) for q in made)
    assert all(shop.catalog.search(q) for q in made[:50])


def test_other_pages_offer_a_click_on_each_label_and_the_env_takes_them(shop):
    task = shop.tasks("train")[0]
    shop.reset(task)
    search = valid_actions(shop)[0]
    assert shop.step(search).info["page"] == "results"
    on_results = actions(shop)
    assert "click[back to search]" in on_results
    item = next(a for a in on_results if a.startswith("click[B"))
    result = shop.step(f"Action: {item}")
    assert result.info["page"] == "item" and "error" not in result.info
    on_item = valid_actions(shop)
    assert f"Action: click[{BUY}]" in " ".join(on_item) and len(on_item) >= 6
    for reply in on_item:  # each one is taken on the item page
        shop.reset(task)
        shop.step(search)
        shop.step(f"Action: {item}")
        taken = shop.step(reply)
        assert "error" not in taken.info, reply
    assert taken.terminated  # the last one is buy now
    assert valid_actions(shop) == []  # the episode is over
