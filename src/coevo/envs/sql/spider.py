"""Loader for the Spider data layout, so the sql env runs on the real benchmark's databases.

    DIR/tables.json                        [{"db_id", "table_names_original", ...}, ...]
    DIR/train_spider.json, DIR/dev.json    [{"db_id", "question", "query", ...}, ...]
    DIR/database/<db_id>/<db_id>.sqlite

Splits: `train` and `test_seen` come from train_spider.json (same databases, disjoint
questions: test_seen is a seeded held-out share), `test_unseen` from dev.json, whose databases
Spider keeps out of training (questions on a database that also appears in train are dropped).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevo.envs.base import EnvError

LAYOUT = "tables.json, train_spider.json, dev.json and database/<db_id>/<db_id>.sqlite"


@dataclass(frozen=True)
class SpiderData:
    """What the loader read: database files, table names and the raw question entries."""

    root: Path
    db_paths: dict[str, Path]
    table_names: dict[str, tuple[str, ...]]
    train: list[dict[str, Any]]
    dev: list[dict[str, Any]]


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise EnvError(
            f"{str(path.parent)!r} is not a Spider directory: {path.name} is missing "
            f"(expected {LAYOUT})."
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EnvError(
            f"{str(path)!r} is not valid JSON ({exc}): fix or replace the file."
        ) from exc


def _questions(path: Path) -> list[dict[str, Any]]:
    entries = _read_json(path)
    if not isinstance(entries, list):
        raise EnvError(f"{str(path)!r} must hold a JSON list of questions.")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not all(
            isinstance(e.get(k), str) for k in ("db_id", "question", "query")
        ):
            raise EnvError(
                f"{str(path)!r} entry {i} lacks a string db_id, question or query: every "
                "question needs all three."
            )
        out.append(
            {"db_id": e["db_id"], "question": e["question"].strip(), "query": e["query"].strip()}
        )
    return out


def load_spider(root: str | Path) -> SpiderData:
    """Read a Spider-layout directory; a missing file or database gets a clear error."""
    root = Path(root)
    tables = _read_json(root / "tables.json")
    if not isinstance(tables, list):
        raise EnvError(f"{str(root / 'tables.json')!r} must hold a JSON list of schemas.")
    table_names = {
        t["db_id"]: tuple(t.get("table_names_original") or t.get("table_names") or ())
        for t in tables
        if isinstance(t, dict) and "db_id" in t
    }
    train = _questions(root / "train_spider.json")
    dev = _questions(root / "dev.json")
    db_paths: dict[str, Path] = {}
    for entry in [*train, *dev]:
        db_id = entry["db_id"]
        if db_id in db_paths:
            continue
        path = root / "database" / db_id / f"{db_id}.sqlite"
        if not path.is_file():
            raise EnvError(
                f"Database {str(path)!r} for db_id {db_id!r} is missing: Spider keeps each "
                "database at database/<db_id>/<db_id>.sqlite."
            )
        db_paths[db_id] = path
    return SpiderData(root, db_paths, table_names, train, dev)


def tables_in_query(query: str, names: tuple[str, ...]) -> list[str]:
    """The schema's tables a query names, in order of first mention (for the expert's DESC)."""
    words = [w.lower() for w in re.findall(r"[A-Za-z_][\w]*", query)]
    by_lower = {n.lower(): n for n in names}
    found: list[str] = []
    for w in words:
        if w in by_lower and by_lower[w] not in found:
            found.append(by_lower[w])
    return found


def spider_candidates(
    data: SpiderData, seed: int, n_test_seen: int
) -> dict[str, list[dict[str, Any]]]:
    """Seeded, ordered candidates per split; the env keeps the first ones whose gold runs."""
    rng = random.Random(f"coevo-sql-spider:{seed}")
    train = list(data.train)
    rng.shuffle(train)
    # Hold out at most a fifth of train_spider.json, so a small sample still trains on most.
    held = min(n_test_seen, len(train) // 5)
    train_dbs = {e["db_id"] for e in data.train}
    dev = [e for e in data.dev if e["db_id"] not in train_dbs]
    rng.shuffle(dev)

    return {
        "train": train[held:],
        "test_seen": train[:held],
        "test_unseen": dev,
    }
