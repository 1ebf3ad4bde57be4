"""The product catalog: one SQLite file with the products and an FTS5 (BM25) search index.

A catalog file is written once (to a temporary name, then renamed, so no process ever opens a
half-written file) and afterwards only read, through an immutable read-only connection. Search
results and parsed products are kept in small in-memory LRU caches: rollouts repeat the same
queries and pages many times.

Search follows WebShop's engine (Lucene BM25 over the product text, English stop words dropped,
Porter stemming, the top 50 returned). The query's words are each quoted, so no FTS5 syntax
(`NEAR`, `*`, `^`, `-`, quotes, parentheses, `col:`) can reach the parser. Ranking: the
products that hold every query word found in the catalog come first, ordered by `bm25()`; when
fewer than 50 do, the BM25 ranking of the OR of the words fills the list. FTS5 evaluates
`bm25()` on every matching row, and an AND matches few: on the expert's queries over 100,000
products a search took a fraction of plain OR's time (benchmarks/results/env_speed.md), and over
5,000 products the first result was the plain-OR one for 197 of 200 queries (top 10: 9.3 shared).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEARCH_RETURN_N = 50
"""Results a search returns (WebShop: 50, i.e. five pages of ten)."""
MAX_QUERY_TERMS = 32
"""A 10,000-character query is cut to its first terms: BM25 cost grows with the term count."""

# Lucene's English stop words (WebShop's search engine drops them) plus the pronouns that open
# most instructions ("i am looking for ..."), which match nothing useful.
_STOP_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with i im am me my we you your"
)
STOP_WORDS = frozenset(_STOP_TEXT.split())
_TERM = re.compile(r"[^\W_]+")


def query_terms(query: str) -> list[str]:
    """The distinct search words of a query, lower-cased, stop words dropped, in order."""
    seen: dict[str, None] = {}
    for term in _TERM.findall(query.lower()):
        if term not in STOP_WORDS and term not in seen:
            seen[term] = None
            if len(seen) == MAX_QUERY_TERMS:
                break
    return list(seen)


@dataclass(frozen=True)
class Product:
    """One product, with the fields WebShop's pages and reward read."""

    asin: str
    title: str
    query: str
    """The search query the product was listed under (WebShop's `query`; the product type)."""
    category: str
    """Top-level category (beauty, food, fashion, ...)."""
    product_category: str
    """Category path, segments joined by " › "."""
    price: float
    """The price the reward compares with the goal's upper bound."""
    price_tag: str
    """The price as the pages show it ("$12.99" or "$12.99 to $20.99")."""
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    """Option groups in page order: (group, values)."""
    bullets: tuple[str, ...]
    description: str
    reviews: tuple[tuple[float, str, str], ...]
    """(score, title, body) per review."""
    rating: str

    def to_json(self) -> str:
        return json.dumps(
            [
                self.asin,
                self.title,
                self.query,
                self.category,
                self.product_category,
                self.price,
                self.price_tag,
                self.attributes,
                self.options,
                self.bullets,
                self.description,
                self.reviews,
                self.rating,
            ],
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Product:
        a = json.loads(text)
        return cls(
            asin=a[0],
            title=a[1],
            query=a[2],
            category=a[3],
            product_category=a[4],
            price=a[5],
            price_tag=a[6],
            attributes=tuple(a[7]),
            options=tuple((g, tuple(v)) for g, v in a[8]),
            bullets=tuple(a[9]),
            description=a[10],
            reviews=tuple((r[0], r[1], r[2]) for r in a[11]),
            rating=a[12],
        )

    def search_keywords(self) -> str:
        """The indexed text besides the title: the product type, its sub-category, attributes.

        Option values (colours, sizes) and the top of the category path are left out: they
        occur in a large share of products, and every matching row costs a BM25 evaluation.
        """
        path = self.product_category.split("›")
        sub = path[-2].strip() if len(path) >= 2 else ""
        return f"{self.query} {sub} {' '.join(self.attributes)}"


_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, asin TEXT NOT NULL UNIQUE, query TEXT NOT NULL,
                       data TEXT NOT NULL);
CREATE INDEX products_query ON products (query);
CREATE TABLE goals (id INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE VIRTUAL TABLE fts USING fts5 (title, keywords, content='',
                                     tokenize='porter unicode61 remove_diacritics 2');
"""


def write_catalog(
    path: Path,
    products: Iterable[Product],
    meta: dict[str, Any],
    goals: Iterable[dict[str, Any]] = (),
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Write a catalog file atomically: build it under a temporary name, then rename it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        con = sqlite3.connect(tmp)
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.executescript(_SCHEMA)
        rows, fts_rows = [], []
        count = 0
        for count, product in enumerate(products, start=1):
            rows.append((count, product.asin, product.query, product.to_json()))
            fts_rows.append((count, product.title, product.search_keywords()))
            if len(rows) == 5000:
                _flush(con, rows, fts_rows)
                if progress:
                    progress(count)
        _flush(con, rows, fts_rows)
        con.executemany(
            "INSERT INTO goals (data) VALUES (?)",
            ((json.dumps(g, ensure_ascii=False),) for g in goals),
        )
        meta = {**meta, "n_products": count}
        con.executemany(
            "INSERT INTO meta VALUES (?, ?)", ((k, json.dumps(v)) for k, v in meta.items())
        )
        con.execute("INSERT INTO fts (fts) VALUES ('optimize')")
        con.commit()
        con.close()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if progress:
        progress(count)
    return path


def _flush(con: sqlite3.Connection, rows: list, fts_rows: list) -> None:
    con.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", rows)
    con.executemany("INSERT INTO fts (rowid, title, keywords) VALUES (?, ?, ?)", fts_rows)
    rows.clear()
    fts_rows.clear()


class Catalog:
    """Read access to a catalog file: search, products by id or ASIN, goals, metadata."""

    def __init__(self, path: str | Path, cache_size: int = 20_000) -> None:
        self.path = Path(path)
        # immutable=1: the file never changes after its rename, so SQLite may skip locking.
        uri = f"file:{self.path.resolve().as_posix()}?mode=ro&immutable=1"
        self._con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self.meta = {k: json.loads(v) for k, v in self._con.execute("SELECT key, value FROM meta")}
        self._cache_size = cache_size
        self._products: OrderedDict[int, Product] = OrderedDict()
        self._searches: OrderedDict[tuple[str, ...], tuple[int, ...]] = OrderedDict()
        self._terms: dict[str, bool] = {}

    def __len__(self) -> int:
        return int(self.meta["n_products"])

    def close(self) -> None:
        self._con.close()

    def search(self, query: str, limit: int = SEARCH_RETURN_N) -> tuple[int, ...]:
        """Product ids of the best `limit` matches of the query's words, best first."""
        terms = tuple(query_terms(query))
        if not terms:
            return ()
        key = (*terms, str(limit))
        hit = self._searches.get(key)
        if hit is not None:
            self._searches.move_to_end(key)
            return hit
        present = [t for t in terms if self._occurs(t)]
        ids = self._ranked(" AND ".join(f'"{t}"' for t in present), limit) if present else ()
        if present and len(ids) < limit:
            # Fewer than `limit` products hold every word: the BM25 OR ranking fills the rest.
            pool = self._ranked(" OR ".join(f'"{t}"' for t in present), limit + len(ids))
            first = set(ids)
            ids = ids + tuple(pid for pid in pool if pid not in first)[: limit - len(ids)]
        self._searches[key] = ids
        if len(self._searches) > self._cache_size:
            self._searches.popitem(last=False)
        return ids

    def _ranked(self, match: str, limit: int) -> tuple[int, ...]:
        # bm25 weights: a word in the title counts twice a word in the other fields; ties go
        # to the lower id so results never depend on SQLite's internal order.
        rows = self._con.execute(
            "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts, 2.0, 1.0), rowid LIMIT ?",
            (match, limit),
        )
        return tuple(row[0] for row in rows)

    def _occurs(self, term: str) -> bool:
        """Whether any product holds the word (after stemming); remembered per word."""
        known = self._terms.get(term)
        if known is None:
            row = self._con.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? LIMIT 1", (f'"{term}"',)
            ).fetchone()
            known = self._terms[term] = row is not None
            if len(self._terms) > 100_000:
                self._terms.clear()
        return known

    def product(self, pid: int) -> Product:
        """The product with catalog id `pid` (1-based)."""
        product = self._products.get(pid)
        if product is not None:
            self._products.move_to_end(pid)
            return product
        row = self._con.execute("SELECT data FROM products WHERE id = ?", (pid,)).fetchone()
        if row is None:
            raise KeyError(f"no product with id {pid} in {self.path}")
        product = Product.from_json(row[0])
        self._products[pid] = product
        if len(self._products) > self._cache_size:
            self._products.popitem(last=False)
        return product

    def id_of(self, asin: str) -> int | None:
        """The catalog id of a product by ASIN, or None."""
        row = self._con.execute("SELECT id FROM products WHERE asin = ?", (asin,)).fetchone()
        return None if row is None else int(row[0])

    def ids_by_query(self) -> dict[str, list[int]]:
        """Product ids grouped by product type (`query`), ids ascending."""
        groups: dict[str, list[int]] = {}
        for pid, query in self._con.execute("SELECT id, query FROM products ORDER BY id"):
            groups.setdefault(query, []).append(pid)
        return groups

    def goals(self) -> list[dict[str, Any]]:
        """Goals stored with the catalog (real WebShop data); empty for generated catalogs."""
        return [json.loads(d) for (d,) in self._con.execute("SELECT data FROM goals ORDER BY id")]
