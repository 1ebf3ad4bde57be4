"""Question / gold-SQL templates over a filled schema, Spider-style.

Every template reads the schema's metadata (labels, categories, numbers, foreign keys and the
role names they carry) and draws its constants from the filled database, so one set of
templates covers all domains. Here: projection, filters, order and limit, aggregates, group by
and having, nested subqueries and set operations over one table; joins are in `joins`. The
generator runs each gold query and keeps the candidates with a non-trivial, deterministic
result.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from coevo.envs.sql.schemas import Table


@dataclass(frozen=True)
class Candidate:
    """A question with its gold query, before validation."""

    question: str
    query: str
    tables: tuple[str, ...]
    kind: str
    tie_check: str | None = None
    """A query whose last two rows must differ: no tie at a LIMIT boundary."""


class Values:
    """Constants drawn from the filled database, deterministically."""

    def __init__(self, conn: sqlite3.Connection, rng: random.Random) -> None:
        self.conn, self.rng = conn, rng
        self._cache: dict[tuple[str, str], list] = {}

    def distinct(self, table: str, column: str) -> list:
        key = (table, column)
        if key not in self._cache:
            rows = self.conn.execute(f"SELECT DISTINCT {column} FROM {table} ORDER BY 1").fetchall()
            self._cache[key] = [r[0] for r in rows if r[0] is not None]
        return self._cache[key]

    def pick(self, table: str, column: str, k: int) -> list:
        values = self.distinct(table, column)
        return self.rng.sample(values, min(k, len(values)))

    def thresholds(self, table: str, column: str) -> list:
        """Two values inside the column's range (30th and 70th percentile of distinct values)."""
        values = self.distinct(table, column)
        if len(values) < 4:
            return []
        return [values[int(len(values) * 0.3)], values[int(len(values) * 0.7)]]

    def median_group(self, sql: str) -> int:
        counts = sorted(r[0] for r in self.conn.execute(sql).fetchall())
        return max(2, counts[len(counts) // 2]) if counts else 2


def lit(value: object) -> str:
    """A constant as SQL text."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def single_table_templates(t: Table, v: Values) -> Iterator[Candidate]:
    T, nums, cats, L = t.name, t.kind("int", "real", "year"), t.kind("cat"), t.label
    key = t.pk.name if t.pk else "rowid"
    one = (T,)
    yield Candidate(f"How many {t.plural} are there?", f"SELECT COUNT(*) FROM {T}", one, "count")
    for n in nums:
        for fn, word in (
            ("AVG", "average"),
            ("MAX", "maximum"),
            ("MIN", "minimum"),
            ("SUM", "total"),
        ):
            if fn == "SUM" and n.kind == "year":
                continue  # a total of years means nothing
            q = f"What is the {word} {n.phrase} of all {t.plural}?"
            yield Candidate(q, f"SELECT {fn}({n.name}) FROM {T}", one, "aggregate")
        q = f"What are the maximum and minimum {n.phrase} of all {t.plural}?"
        yield Candidate(q, f"SELECT MAX({n.name}), MIN({n.name}) FROM {T}", one, "aggregate")
        for x in v.thresholds(T, n.name):
            q = f"How many {t.plural} have {a(n.phrase)} greater than {x}?"
            yield Candidate(q, f"SELECT COUNT(*) FROM {T} WHERE {n.name} > {x}", one, "count")
    for c in cats:
        yield Candidate(
            f"How many different {c.plural} do the {t.plural} have?",
            f"SELECT COUNT(DISTINCT {c.name}) FROM {T}",
            one,
            "aggregate",
        )
        yield Candidate(
            f"List the distinct {c.plural} of all {t.plural}.",
            f"SELECT DISTINCT {c.name} FROM {T}",
            one,
            "projection",
        )
        yield Candidate(
            f"For each {c.phrase}, how many {t.plural} are there?",
            f"SELECT {c.name}, COUNT(*) FROM {T} GROUP BY {c.name}",
            one,
            "group",
        )
        k = v.median_group(f"SELECT COUNT(*) FROM {T} GROUP BY {c.name}")
        yield Candidate(
            f"Which {c.plural} have at least {k} {t.plural}?",
            f"SELECT {c.name} FROM {T} GROUP BY {c.name} HAVING COUNT(*) >= {k}",
            one,
            "having",
        )
        top = f"FROM {T} GROUP BY {c.name} ORDER BY COUNT(*) DESC"
        yield Candidate(
            f"Which {c.phrase} has the most {t.plural}?",
            f"SELECT {c.name} {top} LIMIT 1",
            one,
            "group_order",
            f"SELECT COUNT(*) {top} LIMIT 2",
        )
        for x in v.pick(T, c.name, 3):
            q = f"How many {t.plural} have {c.phrase} {lit(x)}?"
            yield Candidate(q, f"SELECT COUNT(*) FROM {T} WHERE {c.name} = {lit(x)}", one, "count")
        for n in nums:
            yield Candidate(
                f"For each {c.phrase}, what is the average {n.phrase} of the {t.plural}?",
                f"SELECT {c.name}, AVG({n.name}) FROM {T} GROUP BY {c.name}",
                one,
                "group",
            )
            for x in v.pick(T, c.name, 2):
                yield Candidate(
                    f"What is the average {n.phrase} of {t.plural} whose {c.phrase} is {lit(x)}?",
                    f"SELECT AVG({n.name}) FROM {T} WHERE {c.name} = {lit(x)}",
                    one,
                    "aggregate",
                )
            bounds = v.thresholds(T, n.name)
            if bounds:
                lo, hi = bounds
                yield Candidate(
                    f"Which {c.plural} have an average {n.phrase} above {lo}?",
                    f"SELECT {c.name} FROM {T} GROUP BY {c.name} HAVING AVG({n.name}) > {lo}",
                    one,
                    "having",
                )
                yield Candidate(
                    f"Which {c.plural} have both {t.plural} with {n.phrase} above {hi} "
                    f"and {t.plural} with {n.phrase} below {lo}?",
                    f"SELECT {c.name} FROM {T} WHERE {n.name} > {hi} INTERSECT "
                    f"SELECT {c.name} FROM {T} WHERE {n.name} < {lo}",
                    one,
                    "set",
                )
                yield Candidate(
                    f"Which {c.plural} have no {t.noun} with {n.phrase} above {hi}?",
                    f"SELECT {c.name} FROM {T} EXCEPT "
                    f"SELECT {c.name} FROM {T} WHERE {n.name} > {hi}",
                    one,
                    "set",
                )
    if L is None:
        return
    names = L.plural
    yield Candidate(
        f"List the {names} of all {t.plural}.", f"SELECT {L.name} FROM {T}", one, "projection"
    )
    for x in [*nums, *cats]:
        yield Candidate(
            f"List the {names} and {x.plural} of all {t.plural}.",
            f"SELECT {L.name}, {x.name} FROM {T}",
            one,
            "projection",
        )
    for n in nums:
        th = v.thresholds(T, n.name)
        for x in th:
            for op, word in ((">", "greater than"), ("<", "less than")):
                yield Candidate(
                    f"What are the {names} of {t.plural} with {n.phrase} {word} {x}?",
                    f"SELECT {L.name} FROM {T} WHERE {n.name} {op} {x}",
                    one,
                    "filter",
                )
        if th:
            yield Candidate(
                f"List the {names} of {t.plural} whose {n.phrase} is between {th[0]} and {th[1]}.",
                f"SELECT {L.name} FROM {T} WHERE {n.name} BETWEEN {th[0]} AND {th[1]}",
                one,
                "filter",
            )
        for order, word, ext in (("DESC", "highest", "MAX"), ("ASC", "lowest", "MIN")):
            by = f"ORDER BY {n.name} {order}, {key}"
            yield Candidate(
                f"List the {names} of all {t.plural}, ordered by {n.phrase} from "
                f"{word} to {'lowest' if order == 'DESC' else 'highest'}.",
                f"SELECT {L.name} FROM {T} {by}",
                one,
                "order",
            )
            for k in (1, 3):
                what = (
                    f"the {t.noun} with the {word} {n.phrase}"
                    if k == 1
                    else f"the {k} {t.plural} with the {word} {n.phrase}"
                )
                yield Candidate(
                    f"What {'is' if k == 1 else 'are'} the {L.phrase if k == 1 else names} of {what}?",
                    f"SELECT {L.name} FROM {T} {by} LIMIT {k}",
                    one,
                    "order_limit",
                    f"SELECT {n.name} FROM {T} {by} LIMIT {k + 1}",
                )
            yield Candidate(
                f"List the {names} of {t.plural} whose {n.phrase} equals the {word} {n.phrase}.",
                f"SELECT {L.name} FROM {T} WHERE {n.name} = (SELECT {ext}({n.name}) FROM {T})",
                one,
                "subquery",
            )
        yield Candidate(
            f"List the {names} of {t.plural} whose {n.phrase} is above the average {n.phrase}.",
            f"SELECT {L.name} FROM {T} WHERE {n.name} > (SELECT AVG({n.name}) FROM {T})",
            one,
            "subquery",
        )
        for c in cats:
            for x in v.pick(T, c.name, 2):
                yield Candidate(
                    f"List the {names} of {t.plural} whose {n.phrase} is higher than that "
                    f"of every {t.noun} with {c.phrase} {lit(x)}.",
                    f"SELECT {L.name} FROM {T} WHERE {n.name} > "
                    f"(SELECT MAX({n.name}) FROM {T} WHERE {c.name} = {lit(x)})",
                    one,
                    "subquery",
                )
                for y in th[:1]:
                    yield Candidate(
                        f"List the {names} of {t.plural} whose {c.phrase} is {lit(x)} and "
                        f"whose {n.phrase} is greater than {y}.",
                        f"SELECT {L.name} FROM {T} WHERE {c.name} = {lit(x)} AND {n.name} > {y}",
                        one,
                        "filter",
                    )
                    yield Candidate(
                        f"List the {names} of {t.plural} whose {c.phrase} is {lit(x)} or "
                        f"whose {n.phrase} is above {y}.",
                        f"SELECT {L.name} FROM {T} WHERE {c.name} = {lit(x)} UNION "
                        f"SELECT {L.name} FROM {T} WHERE {n.name} > {y}",
                        one,
                        "set",
                    )
    for c in cats:
        for x in v.pick(T, c.name, 3):
            yield Candidate(
                f"List the {names} of {t.plural} whose {c.phrase} is {lit(x)}.",
                f"SELECT {L.name} FROM {T} WHERE {c.name} = {lit(x)}",
                one,
                "filter",
            )
            yield Candidate(
                f"List the {names} of {t.plural} whose {c.phrase} is not {lit(x)}.",
                f"SELECT {L.name} FROM {T} WHERE {c.name} != {lit(x)}",
                one,
                "filter",
            )
        pair = v.pick(T, c.name, 2)
        if len(pair) == 2:
            yield Candidate(
                f"List the {names} of {t.plural} whose {c.phrase} is {lit(pair[0])} or {lit(pair[1])}.",
                f"SELECT {L.name} FROM {T} WHERE {c.name} = {lit(pair[0])} OR {c.name} = {lit(pair[1])}",
                one,
                "filter",
            )
    initials = sorted({str(x)[0] for x in v.distinct(T, L.name)})
    for letter in v.rng.sample(initials, min(2, len(initials))):
        yield Candidate(
            f"Which {t.plural} have {a(L.phrase)} starting with '{letter}'? List the {names}.",
            f"SELECT {L.name} FROM {T} WHERE {L.name} LIKE '{letter}%'",
            one,
            "filter",
        )
