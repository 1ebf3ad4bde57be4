"""Page transitions, pagination, options and sub-pages of the shop, as an agent sees them."""

from __future__ import annotations

import re

import pytest

from coevo.envs.base import EpisodeFinishedError

RESULT_LINE = re.compile(r"^\[(B0[0-9A-Z]{8})\] ", re.MULTILINE)


def results(obs: str) -> list[str]:
    return RESULT_LINE.findall(obs)


@pytest.fixture()
def task(shop):
    return shop.tasks("train")[0]


def test_search_page_lists_the_instruction_and_how_to_search(shop, task):
    obs, info = shop.reset(task)
    assert obs.startswith(f"Instruction: {task.instruction}")
    assert "search[your keywords]" in obs and info == {"page": "search"}


def test_pagination_ten_per_page_next_and_prev(shop, task):
    shop.reset(task)
    obs = shop.step(f"search[{task.data['query']}]").observation
    assert "Page 1 (Total results: 50)" in obs
    assert "[next >]" in obs and "[< prev]" not in obs and "[back to search]" in obs
    page1 = results(obs)
    assert len(page1) == 10
    seen = set(page1)
    for page in range(2, 6):
        obs = shop.step("click[next >]").observation
        assert f"Page {page} (Total results: 50)" in obs and "[< prev]" in obs
        ids = results(obs)
        assert len(ids) == 10 and not seen & set(ids)
        seen |= set(ids)
    assert "[next >]" not in obs  # page 5 is the last of 50
    result = shop.step("click[next >]")
    assert "There is no [next >]" in result.observation and "You can click:" in result.observation
    obs = shop.step("click[< prev]").observation
    assert "Page 4 (Total results: 50)" in obs


def test_item_page_options_sub_pages_prev_and_back(shop, task):
    shop.reset(task)
    shop.step(f"search[{task.data['query']}]")
    obs = shop.step("click[next >]").observation
    asin = results(obs)[0]
    product = shop.catalog.product(shop.catalog.id_of(asin))
    result = shop.step(f"click[{asin}]")
    obs = result.observation
    assert result.info == {"page": "item"}
    assert product.title in obs and f"Price: {product.price_tag}" in obs
    assert "[description] [features] [reviews] [buy now]" in obs and "[< prev]" in obs
    for group, values in product.options:
        assert f"{group}: " + " ".join(f"[{v}]" for v in values) in obs
    if product.options:
        group, values = product.options[0]
        obs = shop.step(f"click[{values[-1]}]").observation
        assert f"(chosen: {values[-1]})" in obs
    obs = shop.step("click[description]").observation
    assert f"Description: {product.description}" in obs and "[buy now]" not in obs
    obs = shop.step("click[< prev]").observation  # back to the item, options kept
    assert "[buy now]" in obs and (not product.options or "(chosen: " in obs)
    obs = shop.step("click[features]").observation
    assert all(f"- {b}" in obs for b in product.bullets)
    shop.step("click[< prev]")
    assert "Reviews:" in shop.step("click[reviews]").observation
    shop.step("click[< prev]")
    obs = shop.step("click[< prev]").observation  # item -> the results page it came from
    assert "Page 2 (Total results: 50)" in obs
    obs = shop.step("click[back to search]").observation
    assert "search[your keywords]" in obs


def test_buy_ends_the_episode_with_the_breakdown(shop, task):
    shop.reset(task)
    shop.step(f"search[{task.data['query']}]")
    obs = shop.step("click[next >]").observation
    shop.step(f"click[{results(obs)[3]}]")
    result = shop.step("click[buy now]")
    assert result.terminated and not result.truncated
    assert "Your score (min 0.0, max 1.0)" in result.observation
    info = result.info
    assert info["page"] == "done" and 0.0 <= result.reward <= 1.0
    assert result.reward == pytest.approx(info["reward"])
    for key in ("type_score", "title_score", "attributes", "options", "price", "price_ok"):
        assert key in info
    with pytest.raises(EpisodeFinishedError):
        shop.step("click[buy now]")


def test_no_purchase_scores_zero_and_the_budget_truncates(shop, task):
    shop.reset(task)
    for step in range(1, shop.max_steps + 1):
        result = shop.step(f"search[{task.data['query']}]" if step == 1 else "click[next >]")
        assert result.reward == 0.0
    assert result.truncated and not result.terminated and shop.max_steps == 15


def test_expert_reaches_one_on_every_task(shop):
    from coevo.envs.conversation import expert_trajectory

    for split in ("train", "test_seen", "test_unseen"):
        for task in shop.tasks(split):
            trajectory = expert_trajectory(shop, task)
            assert trajectory.reward == 1.0 and trajectory.terminated, task.id
            for text in trajectory.agent_texts:
                thought = text.split("\n")[0]
                assert thought.startswith("Thought: ") and len(thought) < 120


def test_env_passes_the_conformance_checker(shop):
    from coevo.envs.check import check_env

    report = check_env(shop, tasks_per_split=10)
    assert report.ok, [(r.name, r.problems) for r in report.failures]
