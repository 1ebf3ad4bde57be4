"""The built-in data: seeded SQLite databases for the 14 schemas and their question pools.

    root = ensure_generated(seed=0)            # builds once, then reuses the cache
    splits = split_pools(load_pool(root), 1500, 200, 200)

Databases and pools live on disk under `$COEVO_CACHE/sql/` (default `~/.cache/coevo/sql/`),
in one directory per generator version and seed. A directory is built under a temporary name
and renamed into place, so a reader never sees a half-written one and two processes building
at once both end with the same complete copy. Everything is a function of (version, seed).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from coevo.config import coevo_cache
from coevo.envs.base import EnvError
from coevo.envs.sql.joins import join_templates, three_table_templates
from coevo.envs.sql.questions import Candidate, Values, single_table_templates
from coevo.envs.sql.schemas import SCHEMAS, UNSEEN, Column, Schema, Table

# Bump when schemas, fill or templates change: caches of older versions are then ignored.
GENERATOR_VERSION = 1


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


FIRST = _words(
    "Ada Alan Bea Cal Dana Eli Faye Gus Hana Ivo Jade Kai Lena Milo Nia Omar Pia Quin Rosa "
    "Sami Tara Uma Vic Wren Xena Yara Zane Ines Otto Lior Maya Noor Rhea Sven Tove Aram "
    "Bram Cleo Dov Esme"
)
LAST = _words(
    "Abbott Bauer Castro Dahl Engel Frost Garza Holt Ito Jensen Kova Lopez Moreau Nakamura "
    "Okafor Petrov Quist Rossi Sato Tran Ueda Varga Weiss Yilmaz Zhou Brandt Cruz Duarte "
    "Ekwueme Fischer Greco Haas Iqbal Juarez Klein Lind Mensah Novak Ortega Pham"
)
ADJ = _words(
    "Silent Golden Hidden Broken Crimson Distant Electric Frozen Gentle Hollow Iron Lucky "
    "Midnight Northern Paper Quiet Restless Scarlet Secret Silver Velvet Wild Winter Wandering "
    "Bright Burning Lost Hungry Sleeping Dancing"
)
NOUN = _words(
    "River Garden Empire Signal Harbor Mirror Orchard Voyage Lantern Kingdom Storm Canyon "
    "Letter Island Tower Comet Forest Meadow Engine Bridge Echo Horizon Market Shadow Window "
    "Circus Compass Desert Feather Summit"
)
ROOTS = _words(
    "Ash Birch Cedar Dover Elm Fairview Glen Hazel Ivy Juniper Kings Linden Maple North "
    "Oak Pine Queens Ridge Stone Thorn Upton Vale Willow York Brook Clear Dale Eagle Fox "
    "Green Hill Lake Mill Rock Sand Silver Spring Sun West Wood"
)
COUNTRIES = _words(
    "Aldoria Belmark Corvania Dastra Elbonia Fenland Galvia Harlow Istria Jovana "
    "Kestria Lumeria Maravia Norvik Ostrava Pellia Quorin Rovania Sardova Tarsis "
    "Ulmara Veloria Wendia Xandor Yseria Zembla Arcadia Borea Calder Doria Estmar "
    "Florin Gondal Helvar"
)
SUBJECTS = _words(
    "Physics Chemistry Biology History Geology Music Economics Linguistics Philosophy "
    "Mathematics Astronomy Statistics Psychology Sociology Architecture Law Medicine "
    "Robotics Ecology Theology Anthropology Finance"
)
PET_A = _words("Little Big Sir Lady Captain Miss Mister Baby Old Lucky Fuzzy Tiny")
PET_B = _words("Biscuit Pepper Shadow Mochi Ziggy Nala Oreo Pickle Rusty Luna Bean Tofu")


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where generated data lives: `cache_dir`, else `$COEVO_CACHE/sql`, else ~/.cache/coevo/sql."""
    if cache_dir is not None:
        return Path(cache_dir)
    return coevo_cache("sql")


def ensure_generated(seed: int = 0, cache_dir: str | Path | None = None) -> Path:
    """The directory holding the databases and `pool.json` for `seed`, built if missing."""
    root = cache_root(cache_dir)
    final = root / f"gen-v{GENERATOR_VERSION}-seed{seed}"
    if (final / "pool.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        build(tmp, seed)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "pool.json").is_file():
                raise  # not a lost race: a real problem (permissions, a stray file)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def build(directory: Path, seed: int) -> None:
    """Fill every schema's database in `directory` and write the validated question pools."""
    pools: dict[str, list[dict[str, Any]]] = {"seen": [], "unseen": []}
    per_db: dict[str, list[dict[str, Any]]] = {}
    for schema in SCHEMAS:
        rng = random.Random(f"coevo-sql:{seed}:{schema.db_id}")
        path = directory / f"{schema.db_id}.sqlite"
        conn = sqlite3.connect(path)
        try:
            fill(schema, conn, rng)
            conn.commit()
            per_db[schema.db_id] = [
                {"db_id": schema.db_id, "question": c.question, "query": c.query,
                 "tables": list(c.tables), "kind": c.kind}
                for c in _validated(candidates(schema, conn, rng), conn)
            ]  # fmt: skip
        finally:
            conn.close()
        rng.shuffle(per_db[schema.db_id])
    for group, ids in (("seen", [s.db_id for s in SCHEMAS if s.db_id not in UNSEEN]),
                       ("unseen", [s.db_id for s in SCHEMAS if s.db_id in UNSEEN])):  # fmt: skip
        pools[group] = _interleave([_interleave(_by_kind(per_db[d])) for d in ids])
    payload = {"version": GENERATOR_VERSION, "seed": seed, **pools}
    (directory / "pool.json").write_text(json.dumps(payload, indent=0))


def fill(schema: Schema, conn: sqlite3.Connection, rng: random.Random) -> None:
    """Create and fill the schema's tables: deterministic for a given `rng` state."""
    keys: dict[str, list[int]] = {}
    for table in schema.tables:
        cols = ", ".join(_ddl(c) for c in table.columns)
        conn.execute(f"CREATE TABLE {table.name} ({cols})")
        rows = _rows(table, keys, rng)
        marks = ", ".join("?" * len(table.columns))
        conn.executemany(f"INSERT INTO {table.name} VALUES ({marks})", rows)
        if table.pk:
            keys[table.name] = [r[0] for r in rows]


def _ddl(c: Column) -> str:
    if c.kind == "pk":
        return f"{c.name} INTEGER PRIMARY KEY"
    if c.kind == "fk":
        return f"{c.name} INTEGER NOT NULL REFERENCES {c.ref}"
    sql_type = {"label": "TEXT", "cat": "TEXT", "int": "INTEGER", "year": "INTEGER"}.get(
        c.kind, "REAL"
    )
    return f"{c.name} {sql_type} NOT NULL"


def _rows(table: Table, keys: dict[str, list[int]], rng: random.Random) -> list[tuple]:
    n = table.rows
    fks = table.kind("fk")
    columns: dict[str, list] = {}
    # A table whose only keys are two foreign keys is a link table: its pairs are unique.
    if not table.pk and len(fks) == 2:
        pairs = _unique_pairs(keys[fks[0].ref], keys[fks[1].ref], n, rng)
        columns[fks[0].name] = [p[0] for p in pairs]
        columns[fks[1].name] = [p[1] for p in pairs]
    for c in table.columns:
        if c.name in columns:
            continue
        if c.kind == "pk":
            columns[c.name] = list(range(1, n + 1))
        elif c.kind == "fk":
            columns[c.name] = _skewed(keys[c.ref], n, rng, unused=0.2)
        elif c.kind == "label":
            columns[c.name] = rng.sample(_label_pool(c), n)
        elif c.kind == "cat":
            columns[c.name] = _skewed(list(c.values), n, rng, unused=0.0)
        elif c.kind in ("int", "year"):
            columns[c.name] = [rng.randint(int(c.lo), int(c.hi)) for _ in range(n)]
        else:
            digits = 2 if c.hi - c.lo < 5 else 1
            columns[c.name] = [round(rng.uniform(c.lo, c.hi), digits) for _ in range(n)]
    return list(zip(*(columns[c.name] for c in table.columns), strict=True))


def _skewed(values: list, n: int, rng: random.Random, unused: float) -> list:
    """n draws with uneven weights (so "which has the most" has an answer), leaving a share unused."""
    keep = rng.sample(values, max(1, round(len(values) * (1 - unused)))) if unused else values
    weights = [rng.random() ** 2 + 0.05 for _ in keep]
    return rng.choices(keep, weights=weights, k=n)


def _unique_pairs(left: list[int], right: list[int], n: int, rng: random.Random) -> list[tuple]:
    left_used = rng.sample(left, max(1, round(len(left) * 0.85)))
    pool = [(x, y) for x in left_used for y in right]
    return sorted(rng.sample(pool, min(n, len(pool))), key=lambda p: rng.random())


def _label_pool(c: Column) -> list[str]:
    if c.style == "person":
        return [f"{f} {la}" for f in FIRST for la in LAST]
    if c.style == "title":
        return [f"{pre}{a} {b}" for pre in ("", "The ") for a in ADJ for b in NOUN]
    if c.style in ("org", "place"):
        return [f"{r}{s}" if s.islower() else f"{r} {s}" for r in ROOTS for s in c.suffixes]
    if c.style == "country":
        return list(COUNTRIES)
    if c.style == "subject":
        return list(SUBJECTS)
    if c.style == "pet":
        return [f"{a} {b}" for a in PET_A for b in PET_B]
    if c.style == "code":
        return [f"{a}{b}{n}" for a in "KLMQ" for b in "AXZ" for n in range(101, 200)]
    raise ValueError(f"Unknown label style {c.style!r} for column {c.name!r}.")


def candidates(schema: Schema, conn: sqlite3.Connection, rng: random.Random) -> list[Candidate]:
    """Every template instance for one filled schema (unvalidated, possibly duplicated)."""
    values = Values(conn, rng)
    found: list[Candidate] = []
    for table in schema.tables:
        found += single_table_templates(table, values)
    for child in schema.tables:
        for f in child.kind("fk"):
            found += join_templates(schema.table(f.ref), child, f, values)
    found += three_table_templates(schema, values)
    return found


def _validated(found: list[Candidate], conn: sqlite3.Connection) -> list[Candidate]:
    """Candidates whose gold result is non-empty, not all NULL and free of ties at a LIMIT."""
    seen_q: set[str] = set()
    seen_sql: set[str] = set()
    kept = []
    for c in found:
        if c.question in seen_q or c.query in seen_sql:
            continue
        rows = conn.execute(c.query).fetchall()
        if not rows or all(v is None for row in rows for v in row):
            continue
        if c.tie_check is not None:
            # The check runs the ordering one row past the LIMIT: equal keys there are a tie.
            keys = conn.execute(c.tie_check).fetchall()
            if len(keys) > len(rows) and keys[len(rows) - 1] == keys[len(rows)]:
                continue
        seen_q.add(c.question)
        seen_sql.add(c.query)
        kept.append(c)
    return kept


def _by_kind(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        groups[item["kind"]].append(item)
    return [groups[k] for k in sorted(groups)]


def _interleave(lists: list[list[Any]]) -> list[Any]:
    """Round-robin over lists, so any prefix mixes all of them evenly."""
    out: list[Any] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def load_pool(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "pool.json").read_text())


def split_pools(
    pool: dict[str, Any], n_train: int, n_test_seen: int, n_test_unseen: int
) -> dict[str, list[dict[str, Any]]]:
    """Train and test_seen from the seen schemas (disjoint questions), test_unseen from the rest."""
    seen, unseen = pool["seen"], pool["unseen"]
    if n_train + n_test_seen > len(seen):
        raise EnvError(
            f"The generator has {len(seen)} questions on the training schemas, fewer than "
            f"n_train + n_test_seen = {n_train + n_test_seen}: lower n_train or n_test_seen."
        )
    if n_test_unseen > len(unseen):
        raise EnvError(
            f"The generator has {len(unseen)} questions on the unseen schemas: set "
            f"n_test_unseen to at most that."
        )
    # Every stride-th question goes to test_seen so both splits cover all schemas and kinds.
    stride = max(1, len(seen) // max(1, n_test_seen))
    test_idx = set(range(stride - 1, len(seen), stride)) if n_test_seen else set()
    test_idx = set(sorted(test_idx)[:n_test_seen])
    if len(test_idx) < n_test_seen:  # only when the stride is 1 and the pool is tight
        test_idx = set(range(n_test_seen))
    test_seen = [q for i, q in enumerate(seen) if i in test_idx]
    train = [q for i, q in enumerate(seen) if i not in test_idx][:n_train]
    return {"train": train, "test_seen": test_seen, "test_unseen": unseen[:n_test_unseen]}
