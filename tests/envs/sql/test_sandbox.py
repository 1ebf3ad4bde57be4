"""The sandbox against hostile SQL: every statement is answered with an error observation,
within the time limit, and the database file stays byte-for-byte the same."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from coevo.envs.sql.sandbox import ERROR_PREFIX, Sandbox, format_rows, lead_keyword

TIME_LIMIT = 0.5
ROW_CAP = 1_000
EVIL = "/tmp/coevo-sql-test-evil"

HOSTILE: dict[str, str] = {
    "attach file": f"ATTACH DATABASE '{EVIL}.db' AS evil",
    "attach memory": "ATTACH ':memory:' AS m",
    "detach": "DETACH DATABASE main",
    "insert": "INSERT INTO singer (name, country, age, genre) VALUES ('x', 'y', 1, 'pop')",
    "insert returning": "INSERT INTO singer SELECT * FROM singer RETURNING *",
    "replace": "REPLACE INTO singer (singer_id, name) VALUES (1, 'x')",
    "update": "UPDATE singer SET age = 0",
    "delete": "DELETE FROM singer",
    "drop": "DROP TABLE singer",
    "drop if exists": "DROP TABLE IF EXISTS singer",
    "create table": "CREATE TABLE t (x)",
    "create temp table": "CREATE TEMP TABLE t (x)",
    "create temp view": "CREATE TEMP VIEW v AS SELECT 1",
    "create temp trigger": "CREATE TEMP TRIGGER tr AFTER INSERT ON singer BEGIN SELECT 1; END",
    "create virtual table": "CREATE VIRTUAL TABLE v USING fts5(x)",
    "alter": "ALTER TABLE singer RENAME TO s2",
    "pragma writable_schema": "PRAGMA writable_schema = ON",
    "pragma schema-qualified": "PRAGMA main.writable_schema = 1",
    "pragma query_only off": "PRAGMA query_only = OFF",
    "pragma journal_mode": "PRAGMA journal_mode = WAL",
    "pragma user_version": "PRAGMA user_version = 7",
    "load_extension": f"SELECT load_extension('{EVIL}.so')",
    "fts3_tokenizer": "SELECT fts3_tokenizer('simple')",
    "vacuum": "VACUUM",
    "vacuum into": f"VACUUM INTO '{EVIL}-copy.db'",
    "reindex": "REINDEX",
    "analyze": "ANALYZE",
    "begin exclusive": "BEGIN EXCLUSIVE",
    "savepoint": "SAVEPOINT s1",
    "explain a write": "EXPLAIN DROP TABLE singer",
    "recursive row bomb": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
    "recursive time bomb": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "cross join time bomb": "SELECT count(*) FROM singer a, singer b, singer c, singer d, singer e, singer f",
    "cross join row bomb": "SELECT * FROM singer a, singer b, singer c",
    "stacked drop": "SELECT 1; DROP TABLE singer",
    "stacked selects": "SELECT 1; SELECT 2",
    "stacked after comment": "SELECT 1 /* ; */ ; ATTACH ':memory:' AS m",
    "drop behind block comment": "/* harmless */ DROP TABLE singer",
    "delete behind line comment": "-- just a comment\nDELETE FROM singer",
    "comment only": "-- nothing here",
    "cte write": "WITH x AS (SELECT 1) DELETE FROM singer",
    "huge blob": "SELECT length(randomblob(2000000000))",
    "huge zeroblob": "SELECT zeroblob(1000000000)",
    "very long input": "SELECT 1 " + "+ 1 " * 200_000,
    "deep nesting": "SELECT " + "(" * 4000 + "1" + ")" * 4000,
    "null byte": "SELECT 1\x00; DROP TABLE singer",
    "lone surrogate": "SELECT '\ud800'",
}


def build(n: int, char: str = "a") -> str:
    """SQL for an n-character string, built inside the statement (as an attacker would)."""
    return f"printf('%.*c', {n}, '{char}')"


COUNT_TO_THE_DEADLINE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
# One function call is one VM instruction, so the progress handler cannot stop these midway.
# Times before the fix (SQLite 3.40, 1 MB value cap): printf 3 to 5 s a call, instr and replace
# 5 to 7 s, trim 188 s at 900 kB (8 s at the size below).
HEAVY_CALLS: dict[str, str] = {
    "printf %c repeat": "SELECT printf('%.*c', 2000000000, 'x')",
    "three printf repeats": "SELECT " + " || ".join(["printf('%.*c', 2000000000, 'x')"] * 3),
    "format literal precision": "SELECT format('%.2000000000c', 'x')",
    "negative precision": "SELECT printf('%-5.*c', -2000000000, 'x')",
    "precision as text": "SELECT printf('%.*c', '2000000000 times', 'x')",
    "many small repeats": f"SELECT printf(replace({build(5000, 'x')}, 'x', '%.999999c'), 'y')",
    "printf width": "SELECT printf('%*d', 2000000000, 1)",
    "printf float precision": "SELECT printf('%.*f', 2000000000, 1.5)",
    "printf integer precision": "SELECT printf('%,.*d', 2000000000, 1)",
    "zeroblob": "SELECT zeroblob(2000000000)",
    "randomblob": "SELECT randomblob(2000000000)",
    "hex of a big blob": "SELECT hex(randomblob(900000))",
    "quote of a big blob": "SELECT quote(zeroblob(900000))",
    "replace chain": "SELECT replace(replace(replace(replace("
    + build(999_990)
    + ", 'a', 'aaaa'), 'a', 'aaaa'), 'a', 'aaaa'), 'a', 'aaaa')",
    "replace long pattern": f"SELECT replace({build(999_990)}, {build(400_000)} || 'b', 'x')",
    "instr long pattern": f"SELECT instr({build(999_990)}, {build(400_000)} || 'b')",
    "instr blobs": "SELECT instr(zeroblob(999990), zeroblob(400000) || x'01')",
    "trim long set": f"SELECT trim({build(200_000)}, {build(16_000, 'b')} || 'a')",
    "ltrim long set": f"SELECT ltrim({build(200_000)}, {build(16_000, 'b')} || 'a')",
    "rtrim long set": f"SELECT rtrim({build(200_000)}, {build(16_000, 'b')} || 'a')",
    "concatenation": f"SELECT {build(999_990)} || {build(999_990)}",
    "group_concat": f"{COUNT_TO_THE_DEADLINE} SELECT length(group_concat({build(1000)})) FROM c",
    "json_group_array": f"{COUNT_TO_THE_DEADLINE} SELECT json_group_array({build(1000)}) FROM c",
    "json_array": f"SELECT json_array({build(600_000)}, {build(600_000)})",
    "json nesting": f"SELECT json(replace({build(900_000, 'x')}, 'x', '['))",
    "like with many wildcards": f"SELECT {build(999_990)} LIKE '%a%a%a%a%a%a%a%a%a%b'",
    "glob with many wildcards": f"SELECT {build(999_990)} GLOB '*a*a*a*a*a*a*a*a*a*b'",
    "largest allowed trim": f"SELECT length(trim({build(39_990)}, {build(999, 'b')} || 'a'))",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def db(sql_cache: Path, tmp_path: Path) -> Path:
    """A private copy of a generated database, so each test hashes its own file."""
    source = next(sql_cache.glob("*/concert_singer.sqlite"))
    target = tmp_path / "concert_singer.sqlite"
    shutil.copyfile(source, target)
    return target


def test_there_are_at_least_twenty_hostile_statements():
    assert len(HOSTILE) >= 20


def test_hostile_statements_are_answered_quickly_and_change_nothing(db: Path):
    before, listing = sha256(db), sorted(p.name for p in db.parent.iterdir())
    box = Sandbox(db, time_limit=TIME_LIMIT, row_cap=ROW_CAP)
    baseline = box.run("SELECT COUNT(*), SUM(age) FROM singer")
    slow: list[str] = []
    for name, sql in HOSTILE.items():
        start = time.monotonic()
        result = box.run(sql)
        elapsed = time.monotonic() - start
        assert not result.ok, f"{name}: was allowed and returned {result.rows!r:.80}"
        assert result.error.startswith(ERROR_PREFIX), name
        if elapsed > TIME_LIMIT + 0.5:
            slow.append(f"{name}: {elapsed:.2f}s")
        # The connection still answers normally, with the same data.
        assert box.run("SELECT COUNT(*), SUM(age) FROM singer") == baseline, name
    box.close()
    assert not slow, slow
    assert sha256(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == listing
    assert not list(Path("/tmp").glob("coevo-sql-test-evil*"))


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("recursive row bomb", "more than 1,000 rows"),
        ("cross join row bomb", "more than 1,000 rows"),
        ("recursive time bomb", "0.5 s limit"),
        ("cross join time bomb", "0.5 s limit"),
        ("stacked drop", "one SQL statement per action"),
        ("drop behind block comment", "DROP statements are not allowed"),
        ("attach memory", "ATTACH statements are not allowed"),
        ("load_extension", "not authorized"),
        ("pragma writable_schema", "not authorized"),
        ("very long input", "the limit is 10,000"),
        ("comment only", "holds no SQL statement"),
        ("explain a write", "EXPLAIN statements are not allowed"),
    ],
)
def test_each_limit_says_what_happened(db: Path, name: str, needle: str):
    box = Sandbox(db, time_limit=TIME_LIMIT, row_cap=ROW_CAP)
    assert needle in box.run(HOSTILE[name]).error
    box.close()


def test_single_heavy_calls_are_answered_within_the_time_limit(db: Path):
    box = Sandbox(db, time_limit=TIME_LIMIT, row_cap=ROW_CAP)
    baseline = box.run("SELECT COUNT(*), SUM(age) FROM singer")
    slow: list[str] = []
    for name, sql in HEAVY_CALLS.items():
        # The CPU time of this thread (SQLite runs in it): what the call costs, not how long a
        # machine busy with other jobs took to give it that time (wall time failed so, 0.96 s
        # for an allowed trim beside a training run; the limit itself is on the wall clock, so
        # a call it stops costs at most that much CPU).
        start = time.thread_time()
        result = box.run(sql)
        elapsed = time.thread_time() - start
        if elapsed > TIME_LIMIT + 0.3:
            slow.append(f"{name}: {elapsed:.2f}s")
        assert result.ok or result.error.startswith(ERROR_PREFIX), name
        assert box.run("SELECT COUNT(*), SUM(age) FROM singer") == baseline, name
    box.close()
    assert not slow, slow


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("printf %c repeat", "printf() would repeat %c 1,999,999,999 times"),
        ("three printf repeats", "printf() would repeat %c"),
        ("format literal precision", "format() would repeat %c 1,999,999,999 times"),
        ("negative precision", "printf() would repeat %c 1,999,999,999 times"),
        ("precision as text", "printf() would repeat %c 1,999,999,999 times"),
        ("many small repeats", "would repeat %c 4,999,990,000 times"),
        ("replace long pattern", "replace() on a value of 999,990 characters with a pattern"),
        ("instr long pattern", "instr() on a value of 999,990 characters"),
        ("instr blobs", "instr() on a value of 999,990 characters"),
        ("trim long set", "trim() on a value of 200,000 characters"),
        ("ltrim long set", "ltrim()"),
        ("rtrim long set", "rtrim()"),
        ("zeroblob", "grew past the 1,000,000-byte limit"),
        ("replace chain", "grew past the 1,000,000-byte limit"),
        ("concatenation", "grew past the 1,000,000-byte limit"),
        ("json_array", "grew past the 1,000,000-byte limit"),
        ("group_concat", "0.5 s limit"),
    ],
)
def test_each_heavy_call_says_what_happened(db: Path, name: str, needle: str):
    box = Sandbox(db, time_limit=TIME_LIMIT)
    error = box.run(HEAVY_CALLS[name]).error
    assert needle in error and error.endswith("."), error
    box.close()


def test_bounded_functions_answer_as_sqlite_does(db: Path):
    ordinary = [
        "SELECT printf('%5.2f|%-4d|%.3c|%s|%%|%!.*c', 3.14159, 7, 'x', name, 3, 'é') FROM singer",
        "SELECT format('%d %q', singer_id, name), printf(NULL), printf(''), printf('%T') FROM singer",
        "SELECT replace(name, 'a', 'AA'), replace(age, 3, ''), replace(NULL, 'a', 'b') FROM singer",
        "SELECT instr(name, 'a'), instr(age, 3), instr(x'0102', x'02'), instr(NULL, 'a') FROM singer",
        "SELECT trim('xxhixx', 'x'), ltrim('  a'), rtrim('a  ', ' '), trim(NULL, 'x')",
        "SELECT trim(name, 'Aa'), ltrim(name, 'A'), rtrim(age, '0') FROM singer",
        HEAVY_CALLS["largest allowed trim"],
        HEAVY_CALLS["printf width"],
    ]
    box = Sandbox(db)
    plain = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    plain.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000)
    for sql in ordinary:
        assert box.run(sql).rows == tuple(plain.execute(sql).fetchall()), sql
    assert box.run(HEAVY_CALLS["largest allowed trim"]).rows == ((0,),)
    assert "wrong number of arguments" in box.run("SELECT trim('a', 'b', 'c')").error
    plain.close()
    box.close()


def test_a_heavy_call_in_an_episode_is_an_observation_and_the_episode_goes_on(sql_env):
    task = next(t for t in sql_env.tasks("train") if t.data["db_id"] == "concert_singer")
    sql_env.reset(task)
    start = time.monotonic()
    heavy = sql_env.step("Action: " + HEAVY_CALLS["three printf repeats"])
    assert time.monotonic() - start < sql_env.time_limit
    assert heavy.observation.startswith(ERROR_PREFIX + "printf() would repeat %c")
    assert not heavy.done
    assert sql_env.step("Action: SELECT COUNT(*) FROM singer").observation == "[(40,)]"


def test_reads_and_schema_inspection_work(db: Path):
    box = Sandbox(db)
    assert box.run("SHOW TABLES").rows == (
        ("concert",), ("singer",), ("singer_in_concert",), ("stadium",),
    )  # fmt: skip
    desc = box.run("desc `singer`;").rows
    assert desc[0] == ("singer_id", "INTEGER", "NO", "PRI", None, "")
    assert [r[0] for r in desc] == ["singer_id", "name", "country", "age", "genre"]
    assert box.run("DESCRIBE singer").rows == desc == box.run("show columns from singer").rows
    assert "no such table: nope" in box.run("DESC nope").error
    assert box.run("PRAGMA table_info(singer)").ok
    assert box.run("SELECT name FROM pragma_table_info('singer')").ok
    assert box.run("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 5) SELECT x FROM c").rows == (
        (1,), (2,), (3,), (4,), (5,),
    )  # fmt: skip
    assert box.run("VALUES (1, 'a')").rows == ((1, "a"),)
    assert box.run("SELECT 1 /* ; trailing */ ; -- done").rows == ((1,),)
    assert box.run("SELEC name FROM singer").error.startswith(ERROR_PREFIX)
    box.close()


def test_a_statement_after_a_timeout_gets_its_full_time(db: Path):
    box = Sandbox(db, time_limit=TIME_LIMIT)
    assert not box.run(HOSTILE["recursive time bomb"]).ok
    assert box.run("SELECT COUNT(*) FROM singer a, singer b").rows == ((1600,),)
    box.close()


def test_unknown_words_read_as_syntax_errors(db: Path):
    box = Sandbox(db)
    assert (
        box.run("frobnicate the widget").error == ERROR_PREFIX + 'near "frobnicate": syntax error'
    )
    assert len(box.run("x" * 9_999).error) < 100
    box.close()


def test_lead_keyword_skips_comments():
    assert lead_keyword("  /* a */ -- b\n  select 1") == "select"
    assert lead_keyword("/* unclosed") == ""
    assert lead_keyword("--x\n/*y*/DROP TABLE t") == "drop"


def test_format_rows_is_intercode_text_and_cut():
    assert format_rows(((1, "a"), (2, None)), 350) == "[(1, 'a'), (2, None)]"
    assert format_rows((), 350) == "[]"
    # Always the first max_chars characters of str(list_of_rows), as InterCode prints them.
    for n_rows in (1, 3, 11, 12, 13, 1000):
        for cut in (5, 40, 349, 350, 351):
            rows = tuple((i, "x" * 20, 1.5) for i in range(n_rows))
            assert format_rows(rows, cut) == str(list(rows))[:cut]
