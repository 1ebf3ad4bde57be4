"""The statements the explorers without a model choose from: generated from each database's
schema and data, every one runs and returns rows, joins follow the declared foreign keys."""

from __future__ import annotations

import sqlite3

from coevo.envs.sql.actions import statements
from coevo.envs.sql.sandbox import Sandbox


def test_every_statement_of_every_database_runs_and_returns_rows(sql_env):
    for db_id in sorted({t.data["db_id"] for t in sql_env.tasks("train")}):
        box = sql_env.sandbox(db_id)
        made = statements(box)
        assert made[0].sql == "SHOW TABLES" and len({s.sql for s in made}) == len(made)
        for s in made:
            result = box.run(s.sql)
            assert result.ok and result.rows, (db_id, s.sql)
            assert bool(s.question) == s.sql.startswith("SELECT"), s
        shapes = " ".join(s.sql for s in made)
        for clause in ("WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT", "COUNT(", "AVG("):
            assert clause in shapes, (db_id, clause)
        assert statements(box) is made  # made once per database


def test_joins_follow_the_declared_foreign_keys(sql_env):
    box = sql_env.sandbox("concert_singer")
    joins = [s.sql for s in statements(box) if " JOIN " in s.sql]
    assert (
        "SELECT T1.concert_name, T2.name FROM concert AS T1 JOIN stadium AS T2 "
        "ON T1.stadium_id = T2.stadium_id" in joins
    )
    # The link table singer_in_concert joins its two tables.
    assert any(s.count(" JOIN ") == 2 and "singer_in_concert AS T1" in s for s in joins)
    assert not [s for s in joins if "singer AS T2 ON T1.concert_id" in s]  # no made-up key


def test_an_odd_schema_gets_quoted_names_and_loses_what_cannot_run(tmp_path):
    path = tmp_path / "odd.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE "team list" (id INTEGER PRIMARY KEY, "team name" TEXT, wins INTEGER);
        CREATE TABLE player (pid INTEGER PRIMARY KEY, name TEXT, note TEXT,
                             team INTEGER REFERENCES "team list");
        CREATE TABLE empty (a TEXT);
        INSERT INTO "team list" VALUES (1, 'Owls', 3), (2, 'Foxes', 5);
        INSERT INTO player VALUES (1, 'Ann', 'it''s fine', 1), (2, 'Bo', NULL, 2),
                                  (3, 'Cy', 'x', 2);
        """
    )
    con.close()
    box = Sandbox(path)
    try:
        made = statements(box)
        sqls = [s.sql for s in made]
        assert 'SELECT "team name" FROM "team list"' in sqls
        assert any('JOIN "team list" AS T2 ON T1.team = T2.id' in s for s in sqls)
        assert [s for s in sqls if "FROM empty" in s] == ["SELECT COUNT(*) FROM empty"]
        assert any("WHERE note = 'it''s fine'" in s for s in sqls)  # a value from the data
        assert all(box.run(s).ok and box.run(s).rows for s in sqls)
        assert "DESC player" in sqls and not [s for s in sqls if s.startswith('DESC "')]
    finally:
        box.close()
