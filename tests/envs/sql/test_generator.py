"""The generator: deterministic, cached atomically, Spider-like coverage."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from coevo.envs.sql.generator import GENERATOR_VERSION, ensure_generated, load_pool
from coevo.envs.sql.schemas import SCHEMAS, UNSEEN


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_schemas_cover_at_least_twelve_domains():
    assert len(SCHEMAS) >= 12 and len({s.db_id for s in SCHEMAS}) == len(SCHEMAS)
    assert 0 < len(UNSEEN) < len(SCHEMAS)
    assert any(len(s.tables) >= 3 for s in SCHEMAS)


def test_same_seed_same_data_other_seed_other_data(sql_cache: Path, tmp_path: Path):
    first = ensure_generated(0, sql_cache)
    second = ensure_generated(0, tmp_path / "again")
    other = ensure_generated(1, tmp_path / "other")
    assert first.name == f"gen-v{GENERATOR_VERSION}-seed0"
    assert load_pool(first) == load_pool(second)
    assert dump(first / "pets.sqlite") == dump(second / "pets.sqlite")
    assert dump(first / "pets.sqlite") != dump(other / "pets.sqlite")


def test_concurrent_builds_end_with_one_complete_copy(tmp_path: Path):
    found: list[Path] = []
    threads = [
        threading.Thread(target=lambda: found.append(ensure_generated(3, tmp_path)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 1
    # No temporary directory is left behind, and the copy is complete.
    assert [p.name for p in tmp_path.iterdir()] == [found[0].name]
    assert len(list(found[0].glob("*.sqlite"))) == len(SCHEMAS)


def test_gold_results_are_non_trivial(sql_cache: Path):
    directory = ensure_generated(0, sql_cache)
    pool = load_pool(directory)
    conns = {s.db_id: sqlite3.connect(directory / f"{s.db_id}.sqlite") for s in SCHEMAS}
    for q in pool["seen"][:300] + pool["unseen"][:100]:
        rows = conns[q["db_id"]].execute(q["query"]).fetchall()
        assert rows and any(v is not None for row in rows for v in row), q
        if "LIMIT" in q["query"]:
            assert "ORDER BY" in q["query"]
    for conn in conns.values():
        conn.close()
