"""The printf reader that bounds %c repeats: counts worked out by hand, then checked on SQLite."""

from __future__ import annotations

import sqlite3

import pytest

from coevo.envs.sql.bounded import c_repeats

# (format, arguments, repeats SQLite's %c loop makes, 'x' characters a %c writes once each)
CASES = [
    ("%.*c", (5, "x"), 4, 1),
    ("%.5c", ("x",), 4, 1),
    ("%.*c", (-5, "x"), 4, 1),  # a negative precision counts as positive
    ("%*.*c", (3, 5, "x"), 4, 1),  # the * width reads an argument first
    ("%d %.*c", (1, 5, "x"), 4, 1),  # %d reads one argument
    ("%%%.3c", ("x",), 2, 1),  # %% reads none
    ("%.3c%.4c", ("x", "x"), 5, 2),
    ("%.*c", ("7 apples", "x"), 6, 1),  # text reads its leading integer
    ("%.*c", (2.9, "x"), 1, 1),  # a real is truncated
    ("%.*c", (2**32 + 5, "x"), 4, 1),  # SQLite casts the argument to a 32-bit int
    ("%.4294967297c", ("x",), 0, 1),  # a literal precision wraps at 32 bits too
    ("%.*c", (-(2**31), "x"), 0, 1),
    ("%T%.9c", ("x",), 0, 0),  # %T is not for SQL: formatting stops there
    ("%.9lc", ("x",), 8, 1),
    ("%5.3c", ("x",), 2, 1),
    ("%.c", ("x",), 0, 1),
    ("%.*c", (None, "x"), 0, 1),
    ("%.3z%.3c", ("abc", "x"), 2, 1),
    ("%.*c", (), 0, 0),  # a missing argument reads as 0 and an empty character
]


@pytest.mark.parametrize(("fmt", "args", "repeats", "once"), CASES)
def test_c_repeats_matches_sqlite_printf(fmt: str, args: tuple, repeats: int, once: int):
    assert c_repeats(fmt, args) == repeats
    conn = sqlite3.connect(":memory:")
    marks = ", ".join("?" * (len(args) + 1))
    (text,) = conn.execute(f"SELECT printf({marks})", (fmt, *args)).fetchone()
    assert (text or "").count("x") == repeats + once
    conn.close()


def test_the_whole_format_is_counted():
    assert c_repeats("%.999999c" * 5000, ("y",) * 5000) == 5000 * 999_998
