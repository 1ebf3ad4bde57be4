"""`SqlEnv`: InterCode-SQL's task on a sandboxed SQLite, on generated data or the Spider layout.

    env = SqlEnv()                          # generated databases (cached on disk)
    env = SqlEnv(data="path/to/spider")     # Spider layout, see coevo.envs.sql.spider

An action is one SQL statement (raw or in a ```sql fence), `SHOW TABLES`, `DESC <table>`, or
`submit`. The observation is the result rows as InterCode prints them, cut at `max_obs_chars`,
or the error text. `submit` scores the last executed statement's result against the gold
result (coevo.envs.sql.reward). A truncated episode is scored the same way, as if the agent had
submitted at its last step (`score_truncated=False` makes it 0 instead): InterCode's own
evaluation submits after every action and keeps the best score, so an agent is never scored 0
there for merely running out of turns; scoring the last result keeps that spirit with a single
final reward.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from coevo.envs.base import EnvError, EpisodeClock, StepResult, check_split
from coevo.envs.evolve import Candidate
from coevo.envs.react import FORMAT_ERROR, format_reply, parse
from coevo.envs.sql import evolve
from coevo.envs.sql.generator import ensure_generated, load_pool, split_pools
from coevo.envs.sql.reward import GoldRows, Score, score
from coevo.envs.sql.sandbox import QueryResult, Sandbox, extract_sql, format_rows
from coevo.envs.sql.spider import load_spider, spider_candidates, tables_in_query
from coevo.trajectory import Task, Trajectory, Turn

_SUBMIT = re.compile(r"^submit\s*;?$", re.IGNORECASE)

INSTRUCTIONS = """\
You answer a question about a SQLite database by querying it, one action per turn.
Reply with one line 'Thought: <your reasoning>' followed by 'Action: <action>'. Actions:
- one SQL query, e.g. Action: SELECT name FROM singer WHERE age > 30 (a ```sql fence and \
several lines are fine); the observation is the result rows, or the error;
- SHOW TABLES lists the tables; DESC <table> lists a table's columns;
- submit ends the episode: the rows of your last query are compared with the correct answer.
The database is read-only. You have at most {max_steps} actions."""


class SqlEnv:
    """InterCode-SQL-compatible env: SQL actions, result-set reward, read-only sandbox."""

    name = "sql"

    def __init__(
        self,
        data: str | Path | None = None,
        *,
        seed: int = 0,
        cache_dir: str | Path | None = None,
        n_train: int = 1500,
        n_test_seen: int = 200,
        n_test_unseen: int = 200,
        max_steps: int = 10,
        max_obs_chars: int = 350,
        time_limit: float = 2.0,
        row_cap: int = 10_000,
        score_truncated: bool = True,
    ) -> None:
        minimums = {
            "max_steps": 1,
            "max_obs_chars": 1,
            "row_cap": 1,
            "n_train": 0,
            "n_test_seen": 0,
            "n_test_unseen": 0,
        }
        given = {
            "max_steps": max_steps,
            "max_obs_chars": max_obs_chars,
            "row_cap": row_cap,
            "n_train": n_train,
            "n_test_seen": n_test_seen,
            "n_test_unseen": n_test_unseen,
        }
        for option, low in minimums.items():
            value = given[option]
            if not isinstance(value, int) or value < low:
                raise EnvError(f"sql option {option} must be an integer >= {low}, got {value!r}.")
        if not time_limit > 0:
            raise EnvError(
                f"sql option time_limit must be a positive number of seconds, got {time_limit!r}."
            )
        self.max_steps = max_steps
        self.max_obs_chars = max_obs_chars
        self.time_limit = float(time_limit)
        self.row_cap = row_cap
        self.score_truncated = bool(score_truncated)
        self.instruction_prompt = INSTRUCTIONS.format(max_steps=max_steps)
        self._clock = EpisodeClock(max_steps)
        self._sandboxes: dict[str, Sandbox] = {}
        self._gold: dict[tuple[str, str], GoldRows | str] = {}
        self._task: Task | None = None
        self._last: QueryResult | None = None
        self.skipped: dict[str, int] = {}
        """Spider questions left out per split because their gold query fails in SQLite."""
        if data is None:
            root = ensure_generated(seed, cache_dir)
            splits = split_pools(load_pool(root), n_train, n_test_seen, n_test_unseen)
            self._db_paths = {p.stem: p for p in sorted(root.glob("*.sqlite"))}
        else:
            spider = load_spider(data)
            self._db_paths = dict(spider.db_paths)
            wanted = {"train": n_train, "test_seen": n_test_seen, "test_unseen": n_test_unseen}
            pools = spider_candidates(spider, seed, n_test_seen)
            splits = {s: self._runnable(pools[s], wanted[s], spider.table_names, s) for s in wanted}
        self._tasks = {
            split: [
                Task(f"sql/{split}/{i:05d}", "sql", split, q["question"],
                     {"db_id": q["db_id"], "query": q["query"], "tables": list(q["tables"]),
                      **({"kind": q["kind"]} if "kind" in q else {})})
                for i, q in enumerate(questions)
            ]
            for split, questions in splits.items()
        }  # fmt: skip

    def _runnable(
        self, entries: list[dict[str, Any]], n: int, names: dict[str, tuple[str, ...]], split: str
    ) -> list[dict[str, Any]]:
        """The first `n` entries whose gold query runs in the sandbox, with their tables."""
        kept: list[dict[str, Any]] = []
        self.skipped[split] = 0
        for entry in entries:
            if len(kept) >= n:
                break
            if isinstance(self._gold_rows(entry["db_id"], entry["query"]), str):
                self.skipped[split] += 1
                continue
            table_names = names.get(entry["db_id"]) or self.sandbox(entry["db_id"]).tables()
            kept.append({**entry, "tables": tables_in_query(entry["query"], table_names)})
        return kept

    def tasks(self, split: str) -> list[Task]:
        return list(self._tasks[check_split(split)])

    def sandbox(self, db_id: str) -> Sandbox:
        """The read-only sandbox of database `db_id` (opened once, kept): what the agent's SQL
        runs in, and what synthesis re-runs an explorer's queries in."""
        box = self._sandboxes.get(db_id)
        if box is None:
            path = self._db_paths.get(db_id)
            if path is None:
                raise EnvError(
                    f"Database {db_id!r} is not in this env's data: build the env with the "
                    "data (or seed) the task came from."
                )
            box = Sandbox(path, time_limit=self.time_limit, row_cap=self.row_cap)
            self._sandboxes[db_id] = box
        return box

    def _gold_rows(self, db_id: str, query: str) -> GoldRows | str:
        """The gold result, computed once per (database, query); an error text if it fails."""
        key = (db_id, query)
        if key not in self._gold:
            result = self.sandbox(db_id).run(query)
            self._gold[key] = GoldRows.of(result.rows) if result.ok else str(result.error)
        return self._gold[key]

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        db_id = task.data.get("db_id")
        if not isinstance(db_id, str) or not isinstance(task.data.get("query"), str):
            raise EnvError(f"Task {task.id!r} is not an sql task: its data needs db_id and query.")
        self.sandbox(db_id)
        self._task = task
        self._last = None
        self._clock.start()
        return f"Question: {task.instruction}\nDatabase: {db_id}", {"db_id": db_id}

    def step(self, action: str) -> StepResult:
        step = self._clock.tick()
        task = self._task
        assert task is not None  # tick() raises before any reset
        parsed = parse(action)
        terminated = False
        info: dict[str, Any] = {"step": step, "executed": False, "error": None}
        if not parsed.ok:
            observation = FORMAT_ERROR
            info["error"] = "format"
        else:
            sql = extract_sql(parsed.action)
            if _SUBMIT.match(sql):
                terminated = True
                observation = "Submitted: the result of your last query was scored."
            else:
                result = self.sandbox(task.data["db_id"]).run(sql)
                self._last = result
                info["executed"] = result.ok
                if result.ok:
                    info["rows"] = len(result.rows)
                    observation = format_rows(result.rows, self.max_obs_chars)
                else:
                    info["error"] = result.error
                    observation = result.error[: self.max_obs_chars]
        truncated = self._clock.finish(terminated)
        reward = 0.0
        if terminated or (truncated and self.score_truncated):
            outcome = self._score(task)
            reward = outcome.reward
            info["score"] = outcome.to_info()
        if terminated or truncated:
            info["submitted"] = terminated
            info["gold_query"] = task.data["query"]
        return StepResult(observation, reward, terminated, truncated, info)

    def _score(self, task: Task) -> Score:
        gold = self._gold_rows(task.data["db_id"], task.data["query"])
        if isinstance(gold, str):
            return score(None, GoldRows.of(()), f"the gold query failed: {gold}")
        if self._last is None:
            return score(None, gold, "no query was executed")
        return score(self._last.rows, gold, self._last.error)

    def expert(self, task: Task) -> list[Turn]:
        tables = list(task.data.get("tables") or [])[: max(0, self.max_steps - 3)]
        replies = [format_reply("I first list the tables of the database.", "SHOW TABLES")]
        replies += [
            format_reply(f"I check the columns of the {t} table.", f"DESC {t}") for t in tables
        ]
        replies.append(
            format_reply("Now I can write the query that answers the question.", task.data["query"])
        )
        replies.append(format_reply("The result answers the question, so I submit it.", "submit"))
        return [Turn("assistant", r) for r in replies]

    def close(self) -> None:
        for box in self._sandboxes.values():
            box.close()
        self._sandboxes.clear()

    # -- agent-data co-evolution: coevo.envs.evolve's capabilities, done in evolve.py ------

    def action_pattern(self, action: str) -> str:
        return evolve.action_pattern(action)

    def valid_actions(self) -> list[str]:
        """The statements valid on the episode's database (none between episodes)."""
        if self._task is None or not self._clock.running:
            return []
        box = self.sandbox(self._task.data["db_id"])
        return evolve.valid_actions(box, self._clock.steps, self._last)

    def tasks_from_exploration(self, trajectory: Trajectory) -> list[Candidate]:
        return evolve.tasks_from_exploration(self.sandbox, trajectory)

    def task_key(self, task: Task) -> str:
        return evolve.task_key(task)
