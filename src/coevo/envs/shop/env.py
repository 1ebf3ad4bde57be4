"""`ShopEnv`: the WebShop-compatible shopping environment (pages, actions, reward, expert)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rapidfuzz import process
from rapidfuzz.utils import default_process

from coevo.envs.base import EnvError, EpisodeClock, StepResult, check_split
from coevo.envs.evolve import Candidate
from coevo.envs.react import FORMAT_ERROR, parse
from coevo.envs.shop import evolve, pages
from coevo.envs.shop.catalog import Catalog
from coevo.envs.shop.expert import expert_turns
from coevo.envs.shop.goals import generated_splits, real_splits
from coevo.envs.shop.pages import RESULTS_PER_PAGE, Action, Page, parse_action
from coevo.envs.shop.reward import score
from coevo.envs.shop.source import generated_catalog, real_catalog
from coevo.trajectory import Task, Trajectory, Turn

INSTRUCTION_PROMPT = (
    "You are web shopping for a customer. Each observation is a page of the shop; anything in "
    "[brackets] can be clicked. Actions:\n"
    "- search[keywords]: search the shop (only on the search page)\n"
    "- click[label]: click a label exactly as shown, e.g. click[next >], click[buy now]\n"
    "Find a product that matches the instruction, choose its options, and buy it with "
    "click[buy now]. Reply with one line 'Thought: <your reasoning>' and one line "
    "'Action: <action>'."
)
_GOAL_KEYS = ("query", "product_category", "name", "attributes", "goal_options", "price_upper")


class ShopEnv:
    """WebShop's text shop over a generated (or real) catalog. See docs/envs.md, section `shop`.

    n_products: size of the generated catalog (ignored with `data`).
    seed: generator and split seed.
    data: a directory in WebShop's data layout to load instead of generating (see `loader`).
    max_steps: step budget per episode.
    n_train, n_test: goals in `train` and in each of `test_seen` / `test_unseen`.
    cache_dir: where catalog files are cached (default `$COEVO_CACHE/shop` or ~/.cache/coevo/shop).
    memory_cache: searches and parsed products kept in memory (LRU; 0 turns caching off).
    """

    name = "shop"
    instruction_prompt = INSTRUCTION_PROMPT

    def __init__(
        self,
        n_products: int = 5000,
        seed: int = 0,
        data: str | Path | None = None,
        max_steps: int = 15,
        n_train: int = 1500,
        n_test: int = 200,
        cache_dir: str | Path | None = None,
        memory_cache: int = 20_000,
    ) -> None:
        if data is None and n_products < 1:
            raise EnvError(f"n_products must be at least 1, got {n_products}.")
        self.max_steps = max_steps
        self.seed = seed
        self.n_train, self.n_test = n_train, n_test
        self._clock = EpisodeClock(max_steps)
        self.catalog: Catalog = (
            generated_catalog(n_products, seed, cache_dir, memory_cache)
            if data is None
            else real_catalog(data, seed, cache_dir, memory_cache)
        )
        self._tasks: dict[str, list[Task]] | None = None
        self._goal: dict[str, Any] = {}
        self._instruction = ""
        self._page = pages.search_page("")
        self._query = ""
        self._results: tuple[int, ...] = ()
        self._page_no = 1
        self._pid = 0
        self._chosen: dict[str, str] = {}

    # --- tasks and expert ------------------------------------------------------------------

    def tasks(self, split: str) -> list[Task]:
        check_split(split)
        if self._tasks is None:
            if self.catalog.meta.get("source") == "generated":
                goals = generated_splits(self.catalog, self.seed, self.n_train, self.n_test)
            else:
                goals = real_splits(self.catalog.goals(), self.seed, self.n_train, self.n_test)
            self._tasks = {
                name: [
                    Task(
                        id=f"shop/{name}/{i:05d}",
                        env=self.name,
                        split=name,
                        instruction=g["instruction"],
                        data={k: v for k, v in g.items() if k != "instruction"},
                    )
                    for i, g in enumerate(split_goals)
                ]
                for name, split_goals in goals.items()
            }
        return list(self._tasks[split])

    def expert(self, task: Task) -> list[Turn]:
        return expert_turns(self.catalog, task)

    # --- episodes -------------------------------------------------------------------------

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        missing = [k for k in _GOAL_KEYS if k not in task.data]
        if missing:
            raise EnvError(
                f"Task {task.id!r} is not a shop task: its data lacks {', '.join(missing)}."
            )
        self._goal = task.data
        self._instruction = task.instruction
        self._clock.start()
        self._show(pages.search_page(self._instruction))
        return self._page.text, {"page": "search"}

    def step(self, action: str) -> StepResult:
        self._clock.tick()
        reward, terminated = 0.0, False
        parsed = parse(action)
        if not parsed.ok:
            observation, info = FORMAT_ERROR, {"page": self._page.name, "error": "format"}
        else:
            act = parse_action(parsed.action)
            if isinstance(act, str):
                observation, info = self._error(act)
            else:
                observation, info, reward, terminated = self._act(act)
        truncated = self._clock.finish(terminated)
        return StepResult(observation, reward, terminated, truncated, info)

    def close(self) -> None:
        self.catalog.close()

    # --- agent-data co-evolution: coevo.envs.evolve's capabilities, done in evolve.py -----

    def action_pattern(self, action: str) -> str:
        return evolve.action_pattern(action)

    def valid_actions(self) -> list[str]:
        """The replies valid on the page shown (none between episodes)."""
        return evolve.valid_actions(self._page, self.catalog) if self._clock.running else []

    def tasks_from_exploration(self, trajectory: Trajectory) -> list[Candidate]:
        return evolve.tasks_from_exploration(self.catalog, trajectory)

    def task_key(self, task: Task) -> str:
        return evolve.task_key(task)

    # --- page transitions -----------------------------------------------------------------

    def _show(self, page: Page) -> None:
        self._page = page

    def _error(self, message: str) -> tuple[str, dict[str, Any]]:
        return f"{message}\n{self._page.menu()}", {"page": self._page.name, "error": message}

    def _results_page(self) -> Page:
        first = (self._page_no - 1) * RESULTS_PER_PAGE
        shown = [self.catalog.product(p) for p in self._results[first : first + RESULTS_PER_PAGE]]
        return pages.results_page(
            self._instruction, self._query, self._results, self._page_no, shown
        )

    def _item_page(self) -> Page:
        product = self.catalog.product(self._pid)
        return pages.item_page(self._instruction, self._pid, product, self._chosen)

    def _act(self, act: Action) -> tuple[str, dict[str, Any], float, bool]:
        if act.verb == "search":
            if self._page.name != "search":
                observation, info = self._error(
                    "You can only search from the search page: click[back to search] first."
                )
                return observation, info, 0.0, False
            query = act.arg.strip()
            if not query:
                observation, info = self._error(
                    "The search keywords are empty: write them in the brackets, e.g. "
                    "search[red running shoes]."
                )
                return observation, info, 0.0, False
            self._query, self._results, self._page_no = query, self.catalog.search(query), 1
            self._show(self._results_page())
            return self._with_note(act.note), {"page": "results"}, 0.0, False
        if self._page.name == "search":
            observation, info = self._error(
                "There is nothing to click on the search page: type search[your keywords]."
            )
            return observation, info, 0.0, False
        resolved = self._page.resolve(act.arg)
        if resolved is None:
            observation, info = self._error(self._not_on_page(act.arg))
            return observation, info, 0.0, False
        label, target = resolved
        note = act.note
        if label != act.arg:
            note = f"{note} (Read click[{act.arg}] as click[{label}].)".strip()
        kind = target[0]
        if kind == "buy":
            return self._buy(note)
        if kind == "back":
            self._results, self._chosen = (), {}
            self._show(pages.search_page(self._instruction))
        elif kind == "next":
            self._page_no += 1
            self._show(self._results_page())
        elif kind == "prev":
            if self._page.name == "results":
                self._page_no -= 1
                self._show(self._results_page())
            elif self._page.name == "item":
                self._show(self._results_page())
            else:
                self._show(self._item_page())
        elif kind == "item":
            self._pid, self._chosen = target[1], {}
            self._show(self._item_page())
        elif kind == "option":
            self._chosen[target[1]] = target[2]
            self._show(self._item_page())
        else:  # a sub-page: description, features, reviews
            self._show(
                pages.sub_page(self._instruction, self.catalog.product(self._pid), target[1])
            )
        return self._with_note(note), {"page": self._page.name}, 0.0, False

    def _with_note(self, note: str) -> str:
        return f"{note}\n{self._page.text}" if note else self._page.text

    def _not_on_page(self, label: str) -> str:
        message = f"There is no [{label[:80]}] to click on this page."
        best = process.extractOne(
            label, list(self._page.clickables), processor=default_process, score_cutoff=60
        )
        if best is not None:
            message += f" Did you mean click[{best[0]}]?"
        return message

    def _buy(self, note: str) -> tuple[str, dict[str, Any], float, bool]:
        product = self.catalog.product(self._pid)
        breakdown = score(product, self._goal, self._chosen)
        reward = breakdown.reward
        if not math.isfinite(reward):  # cannot happen with valid goals; never leak NaN
            reward = 0.0
        observation = pages.done_text(product, self._chosen, reward)
        if note:
            observation = f"{note}\n{observation}"
        info = {"page": "done", "asin": product.asin, "chosen": dict(self._chosen)}
        info.update(breakdown.to_info())
        return observation, info, reward, True
