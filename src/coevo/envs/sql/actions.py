"""The statements an explorer without a language model may run on a task database, each with
the question it answers: generated from the database's own schema and data.

Per table: its columns (`DESC`), projections, filters with values drawn from the data,
counts and aggregates, GROUP BY (with HAVING), ORDER BY ... LIMIT; per declared foreign key:
a join, a join filtered on a value of the other table, and a count per referenced row; per
link table (two foreign keys): the three-table join. Only the schema is read, so Spider's
databases get statements as the generated ones do. Every statement is run once when the list
is made and kept only if it returns rows: an explorer choosing among them never meets an
error or an empty result. Made once per database file (the files never change).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from coevo.envs.sql.sandbox import Sandbox

VALUES_PER_COLUMN = 2
"""Filter values drawn from each text column (a few: each one is another statement)."""
TOP = 3
"""Rows an ORDER BY ... LIMIT statement keeps."""
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_VALUE_CHARS = 40
_NUMERIC = ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC")
_AGGREGATES = (("AVG", "average"), ("MAX", "highest"), ("MIN", "lowest"), ("SUM", "total"))


@dataclass(frozen=True)
class Statement:
    sql: str
    question: str
    """What the statement answers, as a user would ask it ('' for SHOW TABLES and DESC)."""


_made: dict[str, tuple[Statement, ...]] = {}


@dataclass(frozen=True)
class _Column:
    name: str
    numeric: bool
    key: bool
    """A primary or foreign key: an identifier, not a quantity or a category."""


@dataclass(frozen=True)
class _Table:
    name: str
    columns: tuple[_Column, ...]
    refs: tuple[tuple[str, str, str], ...]
    """(column, referenced table, referenced column) per declared foreign key."""

    @property
    def label(self) -> str:
        """The column that names a row: its first text column, else its first column."""
        text = [c.name for c in self.columns if not c.numeric and not c.key]
        return text[0] if text else self.columns[0].name

    def kind(self, *, numeric: bool) -> list[str]:
        """Its non-key columns of one kind, the label left out."""
        return [
            c.name
            for c in self.columns
            if c.numeric == numeric and not c.key and c.name != self.label
        ]


def statements(box: Sandbox) -> tuple[Statement, ...]:
    """Every statement of the database in `box`, schema inspection first, in a fixed order."""
    key = str(box.path.resolve())
    if key not in _made:
        tables = [_table(box, name) for name in box.tables()]
        tables = [t for t in tables if t.columns]
        made = [Statement("SHOW TABLES", "")]
        made += [Statement(f"DESC {t.name}", "") for t in tables if _PLAIN.fullmatch(t.name)]
        by_name = {t.name.lower(): t for t in tables}
        for t in tables:
            made += _single(box, t)
            for column, other, target in t.refs:
                if other.lower() in by_name:
                    made += _joined(box, t, column, by_name[other.lower()], target)
            made += _linked(t, by_name)
        kept, seen = [], set()
        for s in made:
            if s.sql not in seen and _returns_rows(box, s.sql):
                kept.append(s)
                seen.add(s.sql)
        _made[key] = tuple(kept)
    return _made[key]


def _table(box: Sandbox, name: str) -> _Table:
    info = box.run(f"PRAGMA table_info({_q(name)})").rows or ()
    fks = box.run(f"PRAGMA foreign_key_list({_q(name)})").rows or ()
    pk_of = {row[1] for row in info if row[5]}
    refs = []
    for fk in fks:
        other, column, target = fk[2], fk[3], fk[4]
        if target is None:  # REFERENCES t with no column: t's primary key
            target = next((r[1] for r in box.run(f"PRAGMA table_info({_q(other)})").rows or ()
                           if r[5]), None)  # fmt: skip
        if target is not None:
            refs.append((column, other, target))
    keys = pk_of | {r[0] for r in refs}
    columns = tuple(
        _Column(row[1], any(k in str(row[2]).upper() for k in _NUMERIC), row[1] in keys)
        for row in info
    )
    return _Table(name, columns, tuple(refs))


def _single(box: Sandbox, t: _Table) -> list[Statement]:
    """The statements over one table."""
    name, label = _q(t.name), _q(t.label)
    tw, lw = _words(t.name), _words(t.label)
    out = [
        Statement(f"SELECT {label} FROM {name}", f"List the {lw} of every {tw} record."),
        Statement(f"SELECT COUNT(*) FROM {name}", f"How many {tw} records are there?"),
    ]
    texts, numbers = t.kind(numeric=False), t.kind(numeric=True)
    for value in _values(box, t.name, t.label, 1):
        out.append(
            Statement(
                f"SELECT * FROM {name} WHERE {label} = {_literal(value)}",
                f"Show every detail of the {tw} whose {lw} is {_shown(value)}.",
            )
        )
    for c in texts:
        col, cw = _q(c), _words(c)
        out.append(
            Statement(
                f"SELECT {col}, COUNT(*) FROM {name} GROUP BY {col}",
                f"How many {tw} records are there for each {cw}?",
            )
        )
        out.append(
            Statement(
                f"SELECT {col} FROM {name} GROUP BY {col} HAVING COUNT(*) > 1",
                f"Which {cw} values are shared by more than one {tw} record?",
            )
        )
        for value in _values(box, t.name, c, VALUES_PER_COLUMN):
            v, shown = _literal(value), _shown(value)
            out.append(
                Statement(
                    f"SELECT {label} FROM {name} WHERE {col} = {v}",
                    f"What is the {lw} of each {tw} record whose {cw} is {shown}?",
                )
            )
            out.append(
                Statement(
                    f"SELECT COUNT(*) FROM {name} WHERE {col} = {v}",
                    f"How many {tw} records have the {cw} {shown}?",
                )
            )
    for n in numbers:
        col, nw = _q(n), _words(n)
        for fn, word in _AGGREGATES:
            out.append(
                Statement(
                    f"SELECT {fn}({col}) FROM {name}",
                    f"What is the {word} {nw} over all {tw} records?",
                )
            )
        middle = _median(box, t.name, n)
        if middle is not None:
            for op, word in ((">", "above"), ("<", "below")):
                out.append(
                    Statement(
                        f"SELECT {label} FROM {name} WHERE {col} {op} {middle}",
                        f"Which {tw} records have {nw} {word} {middle}? Give their {lw}.",
                    )
                )
        for order, word in (("DESC", "highest"), ("ASC", "lowest")):
            out.append(
                Statement(
                    f"SELECT {label}, {col} FROM {name} ORDER BY {col} {order} LIMIT {TOP}",
                    f"Which {TOP} {tw} records have the {word} {nw}? Give their {lw} and {nw}.",
                )
            )
        if texts:
            group = _q(texts[0])
            out.append(
                Statement(
                    f"SELECT {group}, AVG({col}) FROM {name} GROUP BY {group}",
                    f"What is the average {nw} of the {tw} records for each {_words(texts[0])}?",
                )
            )
    return out


def _joined(box: Sandbox, t: _Table, column: str, u: _Table, target: str) -> list[Statement]:
    """The statements along the foreign key `t.column -> u.target`."""
    join = f"{_q(t.name)} AS T1 JOIN {_q(u.name)} AS T2 ON T1.{_q(column)} = T2.{_q(target)}"
    tl, ul = f"T1.{_q(t.label)}", f"T2.{_q(u.label)}"
    tw, uw, lw, ulw = _words(t.name), _words(u.name), _words(t.label), _words(u.label)
    role = _words(column.removesuffix("_id")) or uw
    out = [
        Statement(
            f"SELECT {tl}, {ul} FROM {join}",
            f"For each {tw} record, give its {lw} and the {ulw} of its {role}.",
        ),
        Statement(
            f"SELECT {ul}, COUNT(*) FROM {join} GROUP BY T1.{_q(column)}",
            f"How many {tw} records does each {role} have? Give the {role}'s {ulw} and the count.",
        ),
    ]
    for value in _values(box, u.name, u.label, 1):
        out.append(
            Statement(
                f"SELECT {tl} FROM {join} WHERE {ul} = {_literal(value)}",
                f"What is the {lw} of each {tw} record whose {role} has the {ulw} {_shown(value)}?",
            )
        )
    return out


def _linked(t: _Table, by_name: dict[str, _Table]) -> list[Statement]:
    """The three-table join through `t` when it links two tables by two foreign keys."""
    refs = [r for r in t.refs if r[1].lower() in by_name]
    if len(refs) < 2:
        return []
    (c1, o1, r1), (c2, o2, r2) = refs[:2]
    a, b = by_name[o1.lower()], by_name[o2.lower()]
    sql = (
        f"SELECT T2.{_q(a.label)}, T3.{_q(b.label)} FROM {_q(t.name)} AS T1 "
        f"JOIN {_q(a.name)} AS T2 ON T1.{_q(c1)} = T2.{_q(r1)} "
        f"JOIN {_q(b.name)} AS T3 ON T1.{_q(c2)} = T3.{_q(r2)}"
    )
    question = (
        f"Which {_words(a.name)} goes with which {_words(b.name)} in the {_words(t.name)} "
        f"records? Give the {_words(a.label)} and the {_words(b.label)}."
    )
    return [Statement(sql, question)]


def _values(box: Sandbox, table: str, column: str, k: int) -> list[Any]:
    """Up to `k` values of a column, drawn by a generator seeded by the column's name."""
    rows = box.run(
        f"SELECT DISTINCT {_q(column)} FROM {_q(table)} WHERE {_q(column)} IS NOT NULL "
        "ORDER BY 1 LIMIT 200"
    ).rows
    values = [r[0] for r in rows or () if _usable(r[0])]
    rng = random.Random(f"sql-actions|{table}|{column}")
    return rng.sample(values, min(k, len(values)))


def _median(box: Sandbox, table: str, column: str) -> int | float | None:
    rows = box.run(
        f"SELECT {_q(column)} FROM {_q(table)} WHERE {_q(column)} IS NOT NULL ORDER BY 1"
    ).rows
    values = [r[0] for r in rows or () if isinstance(r[0], int | float)]
    if not values:
        return None
    middle = values[len(values) // 2]
    return middle if isinstance(middle, int) else round(middle, 2)


def _usable(value: Any) -> bool:
    if isinstance(value, str):
        return 0 < len(value) <= _MAX_VALUE_CHARS and "\n" not in value
    return isinstance(value, int | float)


def _returns_rows(box: Sandbox, sql: str) -> bool:
    result = box.run(sql)
    return result.ok and bool(result.rows)


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _shown(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def _q(identifier: str) -> str:
    """An identifier as SQL: bare when plain (as people write it), else double-quoted."""
    if _PLAIN.fullmatch(identifier):
        return identifier
    return '"' + identifier.replace('"', '""') + '"'


def _words(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).lower()
