"""A read-only SQLite sandbox for agent-written SQL: one statement at a time, bounded in time and rows.

Agent SQL is untrusted input. Four layers keep the database file byte-for-byte unchanged and
every episode in the same state, each enough on its own for the common attacks:

1. the file is opened with the URI `mode=ro` and `PRAGMA query_only=ON`;
2. only statements that start with SELECT, WITH, VALUES or PRAGMA are sent to SQLite at all
   (VACUUM INTO, for one, writes a new file even on a read-only connection);
3. an authorizer allows reads, recursive CTEs, ordinary functions and the schema-inspection
   pragmas only: no ATTACH/DETACH (VACUUM INTO shows up as an ATTACH), no writes, no DDL
   (temporary objects included, so nothing survives into the next episode), no transactions,
   no `load_extension`;
4. limits: a progress handler stops a statement after `time_limit` seconds, a fetch stops past
   `row_cap` rows, strings and blobs are capped in size, no database can be attached, and the
   few built-ins whose single call the progress handler cannot interrupt are checked before
   they run (coevo.envs.sql.bounded).

MySQL-style `SHOW TABLES`, `SHOW COLUMNS FROM t` and `DESC t` / `DESCRIBE t` are answered from
the schema in MySQL's shape, because expert data and real agents inspect schemas that way.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from coevo.envs.base import EnvError
from coevo.envs.sql.bounded import BoundedFunctions

Row = tuple
ERROR_PREFIX = "Error executing query: "

_ALLOWED_LEADS = frozenset({"select", "with", "values", "pragma"})
# The other words an SQLite statement can start with: refused as writes, not as typos.
_STATEMENT_LEADS = frozenset(
    {"alter", "analyze", "attach", "begin", "commit", "create", "delete", "detach", "drop",
     "end", "explain", "insert", "reindex", "release", "replace", "rollback", "savepoint",
     "update", "vacuum"}
)  # fmt: skip
# Pragmas that only describe the schema; every other pragma can change state or is not needed.
_INSPECTION_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
     "foreign_key_list"}
)  # fmt: skip
_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})
_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_MAX_VALUE_BYTES = 1_000_000  # one string or blob; stops randomblob/zeroblob memory bombs
_PROGRESS_OPS = 2_000  # VM instructions between deadline checks (a sliver of the time limit)

_SHOW_TABLES = re.compile(r"^show\s+(?:full\s+)?tables\s*;?$", re.IGNORECASE)
_DESC = re.compile(
    r"^(?:desc|describe|show\s+(?:full\s+)?columns\s+(?:from|in))\s+"
    r"[`\"\[]?([A-Za-z_][\w$]*)[`\"\]]?\s*;?$",
    re.IGNORECASE,
)
_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$))*", re.DOTALL)
_WORD = re.compile(r"[A-Za-z_]+")
_FENCE = re.compile(
    r"```[ \t]*(?:(?:sql|sqlite|mysql)(?=\s))?(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE
)


@dataclass(frozen=True)
class QueryResult:
    """The outcome of one statement: rows, or the error text the agent is shown."""

    rows: tuple[Row, ...] | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _fail(message: str) -> QueryResult:
    return QueryResult(rows=None, error=ERROR_PREFIX + message)


def extract_sql(action: str) -> str:
    """The SQL of an agent's action: inside a ```sql fence, or the action itself without
    surrounding backticks."""
    fence = _FENCE.search(action)
    if fence:
        return fence.group(1).strip()
    return action.strip().strip("`").strip()


def lead_keyword(sql: str) -> str:
    """The first word of a statement after comments and whitespace, lower-cased ('' if none)."""
    rest = sql[_LEADING_NOISE.match(sql).end() :]
    word = _WORD.match(rest)
    return word.group(0).lower() if word else ""


class Sandbox:
    """One read-only connection to one SQLite file, reused across episodes."""

    def __init__(
        self,
        path: str | Path,
        *,
        time_limit: float = 2.0,
        row_cap: int = 10_000,
        max_sql_chars: int = 10_000,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise EnvError(f"SQLite database {str(self.path)!r} does not exist.")
        self.time_limit = time_limit
        self.row_cap = row_cap
        self.max_sql_chars = max_sql_chars
        self._deadline = float("inf")
        self._timed_out = False
        self._tables: tuple[str, ...] | None = None
        self._desc: dict[str, tuple[Row, ...]] = {}
        self._functions = BoundedFunctions(_MAX_VALUE_BYTES)
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        try:
            self._setup()
        except sqlite3.Error as exc:
            self.close()
            raise EnvError(
                f"{str(self.path)!r} cannot be opened as a SQLite database ({exc}): replace "
                "the file with a valid database."
            ) from exc

    def _setup(self) -> None:
        self._conn.execute("PRAGMA query_only = ON")
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, self.max_sql_chars * 4)
        # A pragma's table-valued form (pragma_table_info(...)) registers a virtual table on
        # first use, which asks the authorizer for a schema update: register them now.
        for pragma in sorted(_INSPECTION_PRAGMAS):
            self._conn.execute(f"SELECT * FROM pragma_{pragma}('sqlite_master') LIMIT 0")
        self._functions.install(self._conn)
        self._conn.set_authorizer(_authorize)
        self._conn.set_progress_handler(self._progress, _PROGRESS_OPS)

    def _progress(self) -> int:
        if time.monotonic() > self._deadline:
            self._timed_out = True
            return 1  # non-zero interrupts the statement
        return 0

    def run(self, sql: str) -> QueryResult:
        """Execute one statement (or SHOW TABLES / DESC t); never raises for bad SQL."""
        sql = sql.strip()
        if len(sql) > self.max_sql_chars:
            return _fail(
                f"the statement is {len(sql):,} characters long; the limit is "
                f"{self.max_sql_chars:,}. Send a shorter query."
            )
        if _SHOW_TABLES.match(sql):
            return QueryResult(rows=tuple((name,) for name in self.tables()))
        desc = _DESC.match(sql)
        if desc:
            return self.describe(desc.group(1))
        lead = lead_keyword(sql)
        if lead not in _ALLOWED_LEADS:
            if not lead:
                return _fail("the action holds no SQL statement. Send one SQL query or submit.")
            if lead not in _STATEMENT_LEADS:
                return _fail(f'near "{lead[:40]}": syntax error')
            return _fail(
                f"{lead.upper()} statements are not allowed: the database is read-only; use "
                "SELECT queries, SHOW TABLES or DESC <table>."
            )
        return self._execute(sql)

    def _execute(self, sql: str) -> QueryResult:
        self._timed_out = False
        self._functions.refusal = None
        self._deadline = time.monotonic() + self.time_limit
        try:
            cursor = self._conn.execute(sql)
            rows = cursor.fetchmany(self.row_cap + 1)
            cursor.close()
        except sqlite3.ProgrammingError as exc:
            if "one statement at a time" in str(exc):
                return _fail(
                    "only one SQL statement per action is allowed; send the statements one "
                    "at a time."
                )
            return _fail(str(exc))
        except sqlite3.Error as exc:
            if self._timed_out:
                return _fail(
                    f"the statement ran longer than the {self.time_limit:g} s limit and was "
                    "stopped. Simplify the query or add a LIMIT."
                )
            message = self._functions.refusal or str(exc)
            if message == "string or blob too big":
                message = (
                    f"a string or blob in the statement grew past the {_MAX_VALUE_BYTES:,}-byte "
                    "limit and the statement was stopped; build smaller values."
                )
            elif message == "not authorized":
                message = (
                    "not authorized: the sandbox allows read-only queries and schema "
                    "inspection (SHOW TABLES, DESC <table>) only."
                )
            return _fail(message)
        except (ValueError, UnicodeError, OverflowError, MemoryError) as exc:
            # Null characters, lone surrogates and huge integers fail in the driver, not SQLite.
            return _fail(f"the statement cannot be run ({exc}).")
        finally:
            self._deadline = float("inf")
        if len(rows) > self.row_cap:
            return _fail(
                f"the result has more than {self.row_cap:,} rows and was stopped. Add a "
                "WHERE clause, an aggregate or a LIMIT."
            )
        return QueryResult(rows=tuple(rows))

    def tables(self) -> tuple[str, ...]:
        """The user tables, in name order (cached: the file never changes)."""
        if self._tables is None:
            result = self._execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
            self._tables = tuple(row[0] for row in result.rows or ())
        return self._tables

    def describe(self, table: str) -> QueryResult:
        """MySQL's DESC shape: (Field, Type, Null, Key, Default, Extra) per column."""
        key = table.lower()
        if key not in self._desc:
            names = {t.lower(): t for t in self.tables()}
            if key not in names:
                return _fail(f"no such table: {table}")
            result = self._execute(f"PRAGMA table_info({_quote(names[key])})")
            self._desc[key] = tuple(
                (name, ctype, "NO" if notnull or pk else "YES", "PRI" if pk else "", default, "")
                for _, name, ctype, notnull, default, pk in result.rows or ()
            )
        return QueryResult(rows=self._desc[key])

    def close(self) -> None:
        self._conn.close()
        self._functions.close()


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _authorize(
    action: int, arg1: str | None, arg2: str | None, db: str | None, _: str | None
) -> int:
    """SQLite authorizer: reads and schema inspection only."""
    if action in _ALLOWED_ACTIONS:
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _INSPECTION_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def format_rows(rows: tuple[Row, ...], max_chars: int) -> str:
    """Rows as InterCode shows them (`[(1, 'a'), ...]`), cut at `max_chars` characters.

    Builds the text row by row and stops once past the cut, so a 10,000-row result costs no
    more than a short one.
    """
    parts: list[str] = []
    size = -1  # "[" plus ", " between rows: 1 + sum(len) + 2 * (rows - 1)
    for row in rows:
        text = repr(row)
        parts.append(text)
        size += len(text) + 2
        if size > max_chars:
            break
    text = "[" + ", ".join(parts) + ("]" if len(parts) == len(rows) else "")
    return text[:max_chars]
