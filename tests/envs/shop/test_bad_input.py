"""Bad input: odd queries search without error; bad clicks and sloppy actions get told why."""

from __future__ import annotations

import pytest

from coevo.envs.react import FORMAT_ERROR

ODD_QUERIES = [
    "x" * 10_000,
    " ".join(f"word{i}" for i in range(3_000)),
    "☃ ünïcödé ✓ 漢字 café",
    '"unbalanced quote',
    'shoes" OR "',
    "NEAR(running shoes, 2)",
    "shoes*",
    "^shoes",
    "-shoes",
    "(shoes OR",
    "title:shoes",
    "a AND OR NOT b",
    "'; DROP TABLE products; --",
    "*^-()\"'",
    "\x00\x01",
]


@pytest.mark.parametrize("query", ODD_QUERIES, ids=range(len(ODD_QUERIES)))
def test_odd_queries_search_without_error(shop, query):
    assert isinstance(shop.catalog.search(query), tuple)
    shop.reset(shop.tasks("train")[0])
    result = shop.step(f"search[{query}]")
    assert result.info["page"] == "results" and "[back to search]" in result.observation
    assert not result.done


def test_fts_syntax_is_searched_as_words(shop):
    assert (
        shop.catalog.search("NEAR(running shoes)")[:5]
        == shop.catalog.search("near running shoes")[:5]
    )
    assert shop.catalog.search("-shoes*") == shop.catalog.search("shoes")


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_query_says_so(shop, query):
    shop.reset(shop.tasks("train")[0])
    result = shop.step(f"search[{query}]")
    assert "search keywords are empty" in result.observation and result.info["page"] == "search"


def on_item_page(shop):
    task = shop.tasks("train")[1]
    shop.reset(task)
    obs = shop.step(f"search[{task.data['query']}]").observation
    asin = obs.split("\n")[4].split("]")[0][1:]
    shop.step(f"click[{asin}]")
    return asin


@pytest.mark.parametrize(
    ("action", "says"),
    [
        ("click[no such thing]", "There is no [no such thing] to click on this page."),
        ("click[buy]", "Did you mean click[buy now]?"),
        ("click[buy now] please", "Unexpected text after the action: 'please'"),
        ("click[buy now]\nclick[reviews]", "Unexpected text after the action"),
        ("search[red shoes]", "You can only search from the search page"),
        ("buy[it]", "Unknown action 'buy'"),
        ("click[buy now", "the closing ']' is missing"),
        ("purchase the item", "Invalid action 'purchase the item'"),
    ],
)
def test_bad_actions_on_an_item_page_are_explained(shop, action, says):
    on_item_page(shop)
    steps = shop._clock.steps
    result = shop.step(f"Thought: try.\nAction: {action}")
    assert says in result.observation
    assert "You can click: [back to search] [< prev]" in result.observation
    assert not result.done and result.reward == 0.0 and "error" in result.info
    assert shop._clock.steps == steps + 1  # a step was used


@pytest.mark.parametrize(
    ("action", "note"),
    [
        ("click[Buy Now]", "(Read click[Buy Now] as click[buy now].)"),
        ("click[ buy   now ]", "(Read click[ buy   now ] as click[buy now].)"),
        ("Click[buy now]", "(Read Click[...] as click[...]: write actions in lower case.)"),
        ("click [buy now]", "(Read click [...] as click[...]: write actions in lower case.)"),
    ],
)
def test_wrong_case_and_spacing_work_as_webshop_but_are_pointed_out(shop, action, note):
    on_item_page(shop)
    result = shop.step(action)
    assert result.terminated and result.observation.startswith(note)


def test_product_ids_in_lower_case_are_read_with_a_note(shop):
    task = shop.tasks("train")[1]
    shop.reset(task)
    obs = shop.step(f"search[{task.data['query']}]").observation
    asin = obs.split("\n")[4].split("]")[0][1:]
    result = shop.step(f"click[{asin.lower()}]")
    assert result.info["page"] == "item" and f"as click[{asin}]" in result.observation


def test_clicking_on_the_search_page_and_malformed_replies(shop):
    shop.reset(shop.tasks("train")[0])
    result = shop.step("click[next >]")
    assert "nothing to click on the search page" in result.observation
    assert shop.step("Thought: no action here").observation == FORMAT_ERROR
    assert "Invalid action" in shop.step("Action: ☃ ünïcödé ✓ 漢字").observation


def test_reset_rejects_a_task_of_another_env(shop):
    from coevo.envs.base import EnvError
    from coevo.trajectory import Task

    with pytest.raises(EnvError, match="is not a shop task"):
        shop.reset(Task("toy/train/0", "toy", "train", "Type apple.", {"word": "apple"}))


def test_a_query_that_matches_nothing_is_echoed_cut(shop):
    shop.reset(shop.tasks("train")[0])
    query = "zq" * 50_000  # a 100,000-character action
    result = shop.step(f"search[{query}]")
    assert result.info["page"] == "results" and not result.done
    assert "No products match 'zqzq" in result.observation
    assert "(the first 100 of its 100,000 characters)" in result.observation
    assert len(result.observation) < 600  # was 100,200
    shop.step("click[back to search]")
    short = shop.step("search[zqzqzq]")
    assert "No products match 'zqzqzq'. Go back" in short.observation


@pytest.mark.parametrize("separator", ["", " ", "\t"])
def test_an_action_repeated_in_one_reply_is_one_action_and_unexpected_text(shop, separator):
    shop.reset(shop.tasks("train")[0])
    result = shop.step("Action: " + separator.join(["search[red shoes]"] * 5_000))
    assert result.observation.startswith("Unexpected text after the action: 'search[red shoes]")
    assert "e.g. search[red shoes]." in result.observation
    assert result.info["page"] == "search" and "error" in result.info
    assert len(result.observation) < 400
    # Brackets inside the keywords still belong to the one action.
    nested = shop.step("search[running shoes [size 10]]")
    assert nested.info["page"] == "results" and "error" not in nested.info
