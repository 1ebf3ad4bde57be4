"""SQLite built-ins whose single call can outrun the sandbox's time limit, wrapped with a size check.

The progress handler that enforces the time limit runs between virtual-machine instructions,
and one function call is one instruction. SQLite's length limit makes most builders fail fast
(zeroblob, randomblob, replace growth, ||, json), but a few calls spend time the limit does not
see (measured on SQLite 3.40 with 1 MB values; the figures are in
benchmarks/results/env_speed.md):

- `printf('%.*c', 2000000000, 'x')` loops two billion times even after the result is known
  to be too big (seconds per call, then NULL);
- `instr` and `replace` compare a pattern at every position: a 400 kB pattern in a 1 MB value
  takes seconds;
- `trim`, `ltrim` and `rtrim` with a long character set test every set member at every
  position: minutes for a 900 kB value and an 80 k-character set.

Each is re-registered on the sandbox connection under its own name (an application function
takes precedence over the built-in of the same name and argument count). The wrapper checks
the arguments against a budget, refuses with a sentence the agent is shown, and otherwise
hands the call to the real built-in on a private in-memory connection, so results stay
exactly SQLite's.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Callable

# Pattern-times-value comparisons one call may make: a fraction of a second for trim's
# per-character loop (its measured cost a pair is in benchmarks/results/env_speed.md), far
# less for instr and replace (memcmp).
MAX_PAIRS = 40_000_000

# One printf conversion, as SQLite's own parser reads it (printf.c): flags, then a width
# (digits or *), then a precision (.digits or .*), then l or ll, then the conversion letter.
_SPEC = re.compile(r"%[-+ #!0,]*([1-9][0-9]*|\*)?(?:\.(\*|[0-9]*))?(?:ll?)?(.?)", re.DOTALL)
# Conversions that read one argument when printf is called from SQL; '%' and 'n' read none,
# and any other letter (or the end of the format) stops SQLite's formatting there.
_TAKES_ARGUMENT = frozenset("dsgzqQwcouxXfeEGipr")
_INT64 = 2**63
_LEADING_INT = re.compile(r"\s*([+-]?[0-9]+)")


class FunctionRefused(Exception):
    """A bounded function refused its arguments; the message is the agent's observation."""


class BoundedFunctions:
    """printf/format, instr, replace and the two-argument trims, checked before they run."""

    def __init__(self, max_value_bytes: int) -> None:
        self.max_value_bytes = max_value_bytes
        self.refusal: str | None = None
        """Why the last call was refused (SQLite reports only that a function failed)."""
        self._builtin = sqlite3.connect(":memory:", check_same_thread=False)
        self._builtin.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)

    def install(self, conn: sqlite3.Connection) -> None:
        # Only the argument counts that can be slow: trim(X) with one argument stays built-in.
        for name, n_args, check in (
            ("printf", -1, self._check_printf),
            ("format", -1, self._check_printf),
            ("instr", 2, self._check_pairs),
            ("replace", 3, self._check_pairs),
            ("trim", 2, self._check_pairs),
            ("ltrim", 2, self._check_pairs),
            ("rtrim", 2, self._check_pairs),
        ):
            conn.create_function(name, n_args, self._wrap(name, check), deterministic=True)

    def _wrap(self, name: str, check: Callable[[str, tuple], None]) -> Callable[..., object]:
        def call(*args: object) -> object:
            try:
                check(name, args)
                marks = ", ".join("?" * len(args))
                return self._builtin.execute(f"SELECT {name}({marks})", args).fetchone()[0]
            except FunctionRefused as exc:
                self.refusal = str(exc)
                raise
            except sqlite3.Error as exc:
                # SQLite's own error (say, a value too big) in place of Python's generic one.
                self.refusal = str(exc)
                raise

        return call

    def _check_pairs(self, name: str, args: tuple) -> None:
        n_value, n_pattern = _length(args[0]), _length(args[1])
        if n_value * n_pattern > MAX_PAIRS:
            raise FunctionRefused(
                f"{name}() on a value of {n_value:,} characters with a pattern of "
                f"{n_pattern:,} characters would outrun the time limit; use shorter values."
            )

    def _check_printf(self, name: str, args: tuple) -> None:
        fmt = args[0] if args else None
        if isinstance(fmt, bytes):
            fmt = fmt.decode("utf-8", "replace")
        if not isinstance(fmt, str) or "c" not in fmt:
            return  # no %c conversion, the only one whose time the length limit misses
        repeats = c_repeats(fmt, args[1:])
        if repeats > self.max_value_bytes:
            raise FunctionRefused(
                f"{name}() would repeat %c {repeats:,} times, past the "
                f"{self.max_value_bytes:,}-byte value limit; use a smaller precision."
            )

    def close(self) -> None:
        self._builtin.close()


def c_repeats(fmt: str, args: tuple) -> int:
    """How many times SQLite's printf would append a %c character, over the whole format.

    Follows printf.c: `%.Nc` appends its character N times (and keeps looping after the result
    is already too big); a `*` width or precision reads the next argument as a 32-bit int.
    """
    remaining = iter(args)
    total = 0
    for spec in _SPEC.finditer(fmt):
        width, precision_text, conversion = spec.groups()
        if width == "*":
            next(remaining, None)
        precision = -1
        if precision_text == "*":
            precision = _int32(_int64(next(remaining, None)))
            if precision < 0:
                precision = -precision if precision >= -(2**31 - 1) else -1
        elif precision_text is not None:
            precision = int(precision_text or "0") % 2**32 & 0x7FFFFFFF
        if conversion == "c" and precision > 1:
            total += precision - 1
        if conversion in _TAKES_ARGUMENT:
            next(remaining, None)
        elif conversion not in ("%", "n"):
            break
    return total


def _int64(value: object) -> int:
    """sqlite3_value_int64: text reads its leading integer, reals clamp, NULL is 0."""
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        return int(max(-_INT64, min(_INT64 - 1, value)))
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        match = _LEADING_INT.match(value)
        if match:
            return max(-_INT64, min(_INT64 - 1, int(match.group(1))))
    return 0


def _int32(value: int) -> int:
    """C's (int) cast of an int64."""
    return (value + 2**31) % 2**32 - 2**31


def _length(value: object) -> int:
    if isinstance(value, (str, bytes)):
        return len(value)
    return 0 if value is None else len(str(value))
