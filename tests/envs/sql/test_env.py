"""SqlEnv on generated data: the contract, actions, scoring, truncation and the checker."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from coevo.envs import make
from coevo.envs.base import EnvError, EpisodeFinishedError
from coevo.envs.check import check_env
from coevo.envs.conversation import expert_trajectory
from coevo.envs.react import FORMAT_ERROR
from coevo.envs.sql import SqlEnv
from coevo.envs.sql.sandbox import ERROR_PREFIX, extract_sql
from coevo.trajectory import Task


def task_with(env: SqlEnv, query_part: str) -> Task:
    return next(t for t in env.tasks("train") if query_part in t.data["query"])


def test_registry_builds_the_env(sql_cache: Path):
    env = make("sql", cache_dir=str(sql_cache), n_train=10, n_test_seen=5, n_test_unseen=5)
    assert isinstance(env, SqlEnv) and len(env.tasks("train")) == 10
    env.close()


def test_checker_passes(sql_env: SqlEnv):
    report = check_env(sql_env, tasks_per_split=30)
    assert report.ok, [(r.name, r.problems) for r in report.failures]


def test_expert_scores_one_on_every_generated_task(sql_env: SqlEnv):
    for split in ("train", "test_seen", "test_unseen"):
        for task in sql_env.tasks(split):
            trajectory = expert_trajectory(sql_env, task)
            assert trajectory.reward == 1.0 and trajectory.terminated, task.id


def test_splits_sizes_and_separation(sql_env: SqlEnv):
    train, seen, unseen = (sql_env.tasks(s) for s in ("train", "test_seen", "test_unseen"))
    assert (len(train), len(seen), len(unseen)) == (1500, 200, 200)
    train_dbs = {t.data["db_id"] for t in train}
    assert len(train_dbs | {t.data["db_id"] for t in unseen}) >= 12
    assert {t.data["db_id"] for t in seen} <= train_dbs
    assert not train_dbs & {t.data["db_id"] for t in unseen}
    assert not {t.instruction for t in train} & {t.instruction for t in seen}
    kinds = Counter(t.data["kind"] for t in train)
    for kind in ("projection", "filter", "order", "order_limit", "aggregate", "group", "having",
                 "join", "join3", "subquery", "set"):  # fmt: skip
        assert kinds[kind] > 0, kind
    assert len({t.id for t in train + seen + unseen}) == 1900
    json.dumps([t.to_dict() for t in train])  # task data is JSON


def test_fenced_multiline_sql_and_bare_actions(sql_env: SqlEnv):
    task = task_with(sql_env, "FROM singer")
    sql_env.reset(task)
    fenced = "Thought: count them.\nAction: ```sql\nSELECT COUNT(*)\nFROM singer;\n```"
    assert sql_env.step(fenced).observation == "[(40,)]"
    assert sql_env.step("select count(*) from singer").observation == "[(40,)]"
    assert sql_env.step("Action: `SHOW TABLES`").observation.startswith("[('concert',)")
    assert extract_sql("```SELECT 1```") == "SELECT 1"
    assert extract_sql("``` sqlite\nSELECT 2\n") == "SELECT 2"


def test_partial_answer_scores_iou_worked_out_from_the_data(sql_env: SqlEnv):
    query = "SELECT name FROM singer WHERE age > 40"
    task = Task(
        "sql/custom",
        "sql",
        "train",
        "Singers over 40?",
        {"db_id": "concert_singer", "query": query},
    )
    sql_env.reset(task)
    # All singers instead of the filtered ones: the gold rows are a subset in the same
    # (rowid) order, so tau = 1 and the reward is |gold| / 40.
    gold = sql_env.step(query).info["rows"]
    assert 0 < gold < 40
    sql_env.step("SELECT name FROM singer")
    result = sql_env.step("submit")
    assert result.terminated and result.reward == round(gold / 40, 2)
    assert result.info["score"]["intersection"] == gold and result.info["score"]["union"] == 40
    # The same rows in another order: IoU 1, the ordering factor alone lowers the reward.
    sql_env.reset(task)
    sql_env.step(query + " ORDER BY rowid DESC")
    result = sql_env.step("submit")
    assert result.info["score"]["iou"] == 1.0 and result.info["score"]["order_factor"] < 1
    assert result.reward < 1.0


def test_submit_scores_the_last_executed_statement(sql_env: SqlEnv):
    task = task_with(sql_env, "FROM singer")
    sql_env.reset(task)
    sql_env.step(task.data["query"])
    sql_env.step("Thought: I forgot the action.")  # a format error executes nothing
    assert sql_env.step("submit").reward == 1.0
    sql_env.reset(task)
    sql_env.step(task.data["query"])
    assert sql_env.step("SELECT nope FROM singer").observation.startswith(ERROR_PREFIX)
    result = sql_env.step("Action: submit")
    assert result.reward == 0.0 and "no such column" in result.info["score"]["error"]
    sql_env.reset(task)
    result = sql_env.step("submit")
    assert result.reward == 0.0 and result.info["score"]["error"] == "no query was executed"


def test_truncated_episode_is_scored_as_if_submitted(sql_cache: Path):
    env = SqlEnv(cache_dir=sql_cache, max_steps=3, n_train=50, n_test_seen=5, n_test_unseen=5)
    task = env.tasks("train")[0]
    env.reset(task)
    env.step("SHOW TABLES")
    env.step("Thought: hmm\nAction: SHOW TABLES")
    result = env.step(task.data["query"])
    assert result.truncated and not result.terminated and result.reward == 1.0
    assert result.info["submitted"] is False
    with pytest.raises(EpisodeFinishedError):
        env.step("submit")
    env.close()
    strict = SqlEnv(cache_dir=sql_cache, max_steps=1, score_truncated=False, n_train=50)
    strict.reset(task)
    result = strict.step(task.data["query"])
    assert result.truncated and result.reward == 0.0 and "score" not in result.info
    strict.close()


def test_observations_are_cut_and_info_is_json(sql_cache: Path):
    env = SqlEnv(cache_dir=sql_cache, max_obs_chars=60, n_train=50)
    task = task_with(env, "FROM singer")
    env.reset(task)
    # Query results and database errors are cut; the env's own guidance is not.
    for action in (
        "SELECT * FROM singer",
        "SELECT no_such_column_at_all FROM singer",
        "DROP TABLE t",
    ):
        result = env.step(action)
        assert len(result.observation) == 60
        json.dumps(result.info)
    assert env.step("").observation == FORMAT_ERROR
    json.dumps(env.step("submit").info)
    env.close()


def test_format_errors_use_a_step(sql_env: SqlEnv):
    sql_env.reset(sql_env.tasks("train")[0])
    result = sql_env.step("Thought: no action here")
    assert result.observation == FORMAT_ERROR and result.info["step"] == 1 and not result.done


def test_episodes_leave_every_database_unchanged(sql_env: SqlEnv, sql_cache: Path):
    files = sorted(sql_cache.glob("*/*.sqlite"))
    before = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    for task in sql_env.tasks("test_seen")[:20] + sql_env.tasks("test_unseen")[:20]:
        sql_env.reset(task)
        for action in ("DROP TABLE x", "CREATE TEMP TABLE t(x)", "PRAGMA writable_schema=1",
                       "ATTACH ':memory:' AS m", task.data["query"], "submit"):  # fmt: skip
            result = sql_env.step(action)
        assert result.reward == 1.0
    assert [hashlib.sha256(f.read_bytes()).hexdigest() for f in files] == before


def test_bad_options_and_foreign_tasks_get_clear_errors(sql_cache: Path):
    with pytest.raises(EnvError, match="max_obs_chars"):
        SqlEnv(cache_dir=sql_cache, max_obs_chars=0)
    with pytest.raises(EnvError, match="max_steps"):
        SqlEnv(cache_dir=sql_cache, max_steps=0)
    with pytest.raises(EnvError, match="time_limit"):
        SqlEnv(cache_dir=sql_cache, time_limit=0)
    with pytest.raises(EnvError, match="lower n_train or n_test_seen"):
        SqlEnv(cache_dir=sql_cache, n_train=100_000)
    env = SqlEnv(cache_dir=sql_cache, n_train=5)
    with pytest.raises(EnvError, match="not an sql task"):
        env.reset(Task("toy/1", "toy", "train", "Type apple.", {"word": "apple"}))
    with pytest.raises(EnvError, match="not in this env's data"):
        env.reset(Task("sql/x", "sql", "train", "?", {"db_id": "nope", "query": "SELECT 1"}))
    env.close()
