"""The trajectory store: one SQLite file (WAL) per run with tasks, trajectories and pairs.

Tasks an `agent_data` run synthesized are in `synthesized` too, each with its provenance (the
signal and the exploration it came from). Opening an older store adds the table (SCHEMA's
CREATE IF NOT EXISTS); a read-only store without it has no synthesized tasks.

Every `add_*` call is one transaction: a batch is either all there or not there at all, so a
run killed at any moment (kill -9 included) loses nothing it had committed and never leaves half
a batch. Commits are fully synchronous: they survive the process dying mid-write.

    with Store(run_dir) as store:
        ids = store.add_trajectories(rollouts, iteration=1)
        store.add_pairs(pairs, iteration=1)
        failures = store.trajectories(iteration=1, agent="target", max_reward=0.99)

Pairs point at trajectory rows; a pair's trajectories (an expert demonstration, say) are stored
with it when they are not in the store yet, matched by content.

A damaged file (a disk that filled up, a copy cut short) is reported as a `StoreError` naming
it, and is never written to: moved aside, it leaves the rest of the run usable, since a stage
whose rows are missing from the store runs again (`coevo.run.pipeline`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevo.trajectory import Pair, Task, Trajectory, Turn

FILENAME = "store.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    env TEXT NOT NULL,
    id TEXT NOT NULL,
    split TEXT NOT NULL,
    instruction TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (env, id)
);
CREATE TABLE IF NOT EXISTS trajectories (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    stage TEXT NOT NULL DEFAULT '',
    agent TEXT NOT NULL,
    env TEXT NOT NULL,
    task TEXT NOT NULL,
    split TEXT NOT NULL,
    sample INTEGER NOT NULL DEFAULT 0,
    reward REAL NOT NULL,
    terminated INTEGER NOT NULL,
    truncated INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    turns TEXT NOT NULL,
    metadata TEXT NOT NULL,
    content TEXT NOT NULL,
    created REAL NOT NULL,
    FOREIGN KEY (env, task) REFERENCES tasks (env, id)
);
CREATE INDEX IF NOT EXISTS trajectories_by_iteration ON trajectories (iteration, agent, split);
CREATE INDEX IF NOT EXISTS trajectories_by_task ON trajectories (env, task);
CREATE INDEX IF NOT EXISTS trajectories_by_content ON trajectories (content);
CREATE INDEX IF NOT EXISTS trajectories_by_stage ON trajectories (stage);
CREATE TABLE IF NOT EXISTS pairs (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    stage TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL,
    chosen INTEGER NOT NULL REFERENCES trajectories (id),
    rejected INTEGER NOT NULL REFERENCES trajectories (id),
    weight REAL NOT NULL,
    sft_weight REAL NOT NULL,
    metadata TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS pairs_by_iteration ON pairs (iteration, kind);
CREATE TABLE IF NOT EXISTS synthesized (
    env TEXT NOT NULL,
    task TEXT NOT NULL,
    stage TEXT NOT NULL,
    round INTEGER NOT NULL,
    provenance TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (env, task),
    FOREIGN KEY (env, task) REFERENCES tasks (env, id)
);
"""


# What a trajectory row is read back from, in `_row_to_stored`'s order.
_TRAJECTORY_COLUMNS = (
    "id, iteration, agent, env, task, sample, reward, terminated, truncated, steps, turns, metadata"
)


class StoreError(Exception):
    """A user-facing problem opening or reading a store: names the thing and the fix."""


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    # SQLITE_CORRUPT and SQLITE_NOTADB arrive as the base class; locked, busy, I/O and
    # constraint errors have subclasses of their own and are not damage.
    return type(exc) is sqlite3.DatabaseError


@dataclass(frozen=True)
class StoredTrajectory:
    """A trajectory with its row id and the iteration it was stored under."""

    id: int
    iteration: int
    trajectory: Trajectory


@dataclass(frozen=True)
class StoredSynthesized:
    """A task an agent_data run synthesized: the stage and round that made it, and where it
    came from (its signal, its exploration episode's row id, what the env read from it)."""

    task: Task
    stage: str
    round: int
    provenance: dict[str, Any]


@dataclass(frozen=True)
class StoredPair:
    """A pair with its row id, iteration and the row ids of its two trajectories."""

    id: int
    iteration: int
    chosen_id: int
    rejected_id: int
    pair: Pair


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _content_key(trajectory: Trajectory) -> str:
    return hashlib.blake2b(trajectory.to_json().encode(), digest_size=16).hexdigest()


def store_path(path: Path | str) -> Path:
    """The store file of a run directory (or `path` itself when it names a file)."""
    path = Path(path)
    return path if path.suffix in (".sqlite", ".db") else path / FILENAME


class Store:
    """A run's SQLite store; `label` names the run in every row (default: the directory name)."""

    def __init__(
        self,
        path: Path | str,
        *,
        label: str | None = None,
        create: bool = True,
        readonly: bool = False,
    ) -> None:
        """`readonly`: only read (reports, exports), never migrate or write, so a finished run
        made by an older coevo, or one on a read-only disk, reads as it is."""
        self.path = store_path(path)
        self._columns = _TRAJECTORY_COLUMNS
        if not self.path.exists():
            if not create or readonly:
                raise StoreError(
                    f"No store at {str(self.path)!r}: pass a run directory that a coevo run "
                    "has written to."
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.label = label or self.path.parent.name
        if readonly:
            self._db = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0
            )
            try:
                with self._guard():
                    columns = {r[1] for r in self._db.execute("PRAGMA table_info(trajectories)")}
            except BaseException:
                self._db.close()
                raise
            if "sample" not in columns:  # a store from before the column (see `_migrate`)
                self._columns = _TRAJECTORY_COLUMNS.replace("sample", "0")
            return
        # Autocommit mode: each batch opens its own explicit transaction below.
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        try:
            # The first statement reads the header, so a damaged file fails here, before
            # anything is written to it.
            with self._guard():
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.execute("PRAGMA foreign_keys=ON")
                self._migrate()
                self._db.executescript(SCHEMA)
        except BaseException:
            self._db.close()
            raise

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Turn SQLite's report of a damaged file into one sentence naming the file and the fix."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise
            raise StoreError(
                f"{str(self.path)!r} is damaged (SQLite: {exc}), so the trajectories and pairs "
                f"it holds cannot be read: move it and any {self.path.name}-wal and "
                f"{self.path.name}-shm files beside it out of the run directory and rerun, "
                "which keeps finished stages whose outputs are on disk and runs again the "
                "stages whose rows it held."
            ) from None

    def _migrate(self) -> None:
        """Bring a store written by an earlier coevo up to SCHEMA (columns added since)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(trajectories)")}
        if columns and "sample" not in columns:
            with self._transaction() as db:
                db.execute("ALTER TABLE trajectories ADD COLUMN sample INTEGER NOT NULL DEFAULT 0")
                # The sample index used to live in the metadata.
                db.execute(
                    "UPDATE trajectories SET sample = json_extract(metadata, '$.sample') "
                    "WHERE json_extract(metadata, '$.sample') IS NOT NULL"
                )

    # -- writing ----------------------------------------------------------------------

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    @staticmethod
    def _insert_tasks(db: sqlite3.Connection, tasks: Iterable[Task]) -> None:
        db.executemany(
            "INSERT OR IGNORE INTO tasks (env, id, split, instruction, data) VALUES (?, ?, ?, ?, ?)",
            [(t.env, t.id, t.split, t.instruction, _json(t.data)) for t in tasks],
        )

    def add_trajectories(
        self, trajectories: Sequence[Trajectory], *, iteration: int = 0, stage: str = ""
    ) -> list[int]:
        """Store a batch in one transaction; returns the new row ids in order.

        `stage` names the pipeline stage that produced the batch (e.g. `explore-2-target`), so
        a stage cut off by a kill can find what it already committed.
        """
        with self._guard(), self._transaction() as db:
            return self._insert_trajectories(db, trajectories, iteration, stage)

    def _insert_trajectories(
        self,
        db: sqlite3.Connection,
        trajectories: Sequence[Trajectory],
        iteration: int,
        stage: str = "",
    ) -> list[int]:
        self._insert_tasks(db, {(t.task.env, t.task.id): t.task for t in trajectories}.values())
        now = time.time()
        ids = []
        for t in trajectories:
            cursor = db.execute(
                "INSERT INTO trajectories (run, iteration, stage, agent, env, task, split, "
                "sample, reward, terminated, truncated, steps, turns, metadata, content, "
                "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.label,
                    iteration,
                    stage,
                    t.agent,
                    t.task.env,
                    t.task.id,
                    t.task.split,
                    int(t.sample),
                    float(t.reward),
                    int(t.terminated),
                    int(t.truncated),
                    int(t.steps),
                    _json([turn.to_dict() for turn in t.turns]),
                    _json(t.metadata),
                    _content_key(t),
                    now,
                ),
            )
            ids.append(int(cursor.lastrowid))
        return ids

    def add_pairs(self, pairs: Sequence[Pair], *, iteration: int = 0, stage: str = "") -> list[int]:
        """Store a batch of pairs (and any of their trajectories not stored yet) at once."""
        with self._guard(), self._transaction() as db:
            known: dict[str, int] = {}
            for pair in pairs:
                for t in (pair.chosen, pair.rejected):
                    key = _content_key(t)
                    if key in known:
                        continue
                    row = db.execute(
                        "SELECT id FROM trajectories WHERE content = ? ORDER BY id LIMIT 1", (key,)
                    ).fetchone()
                    known[key] = (
                        row[0] if row else self._insert_trajectories(db, [t], iteration, stage)[0]
                    )
            now = time.time()
            ids = []
            for pair in pairs:
                cursor = db.execute(
                    "INSERT INTO pairs (run, iteration, stage, kind, chosen, rejected, weight, "
                    "sft_weight, metadata, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        self.label,
                        iteration,
                        stage,
                        pair.kind,
                        known[_content_key(pair.chosen)],
                        known[_content_key(pair.rejected)],
                        float(pair.weight),
                        float(pair.sft_weight),
                        _json(pair.metadata),
                        now,
                    ),
                )
                ids.append(int(cursor.lastrowid))
            return ids

    def add_synthesized(
        self, tasks: Sequence[tuple[Task, dict[str, Any]]], *, stage: str, round: int
    ) -> None:
        """Store the verified tasks of `stage` with their provenance, in one transaction that
        first drops what `stage` stored before (a stage rerun after a kill replaces its rows)."""
        with self._guard(), self._transaction() as db:
            db.execute("DELETE FROM synthesized WHERE stage = ?", (stage,))
            self._insert_tasks(db, [t for t, _ in tasks])
            now = time.time()
            db.executemany(
                "INSERT INTO synthesized (env, task, stage, round, provenance, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(t.env, t.id, stage, round, _json(p), now) for t, p in tasks],
            )

    # -- reading ----------------------------------------------------------------------

    def synthesized(self, *, stage: str | None = None) -> list[StoredSynthesized]:
        """The synthesized tasks (of `stage`, or all), in the order they were stored."""
        with self._guard():
            known = self._db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'synthesized'"
            ).fetchone()
            if known is None:  # a read-only store from before the table
                return []
            sql = "SELECT env, task, stage, round, provenance FROM synthesized"
            args: tuple[Any, ...] = ()
            if stage is not None:
                sql, args = sql + " WHERE stage = ?", (stage,)
            rows = self._db.execute(sql + " ORDER BY rowid", args).fetchall()
            tasks = self._tasks()
        return [
            StoredSynthesized(tasks[(env, task)], stage_, round_, json.loads(p))
            for env, task, stage_, round_, p in rows
        ]

    def _tasks(self) -> dict[tuple[str, str], Task]:
        rows = self._db.execute("SELECT env, id, split, instruction, data FROM tasks")
        return {
            (env, id_): Task(id_, env, split, instruction, json.loads(data))
            for env, id_, split, instruction, data in rows
        }

    def stored_trajectories(
        self,
        *,
        iteration: int | None = None,
        stage: str | None = None,
        agent: str | None = None,
        split: str | None = None,
        task: str | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
    ) -> Iterator[StoredTrajectory]:
        """Stored trajectories matching every filter given, in insertion order."""
        where, args = [], []
        for column, op, value in (
            ("iteration", "=", iteration),
            ("stage", "=", stage),
            ("agent", "=", agent),
            ("split", "=", split),
            ("task", "=", task),
            ("reward", ">=", min_reward),
            ("reward", "<=", max_reward),
        ):
            if value is not None:
                where.append(f"{column} {op} ?")
                args.append(value)
        sql = f"SELECT {self._columns} FROM trajectories"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._guard():
            rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
            # After the rows: a batch another process commits in between (its tasks with it,
            # `add_trajectories`) is then either not among the rows or among the tasks.
            tasks = self._tasks()
        for row in rows:
            yield self._row_to_stored(row, tasks)

    @staticmethod
    def _row_to_stored(row: tuple, tasks: dict[tuple[str, str], Task]) -> StoredTrajectory:
        id_, iteration, agent, env, task, sample, reward, terminated, truncated, steps = row[:10]
        turns, meta = row[10:]
        trajectory = Trajectory(
            task=tasks[(env, task)],
            agent=agent,
            turns=tuple(Turn.from_dict(t) for t in json.loads(turns)),
            reward=reward,
            terminated=bool(terminated),
            truncated=bool(truncated),
            steps=steps,
            metadata=json.loads(meta),
            sample=sample,
        )
        return StoredTrajectory(id_, iteration, trajectory)

    def trajectories(self, **filters: Any) -> list[Trajectory]:
        """Trajectories matching the filters of `stored_trajectories`."""
        return [s.trajectory for s in self.stored_trajectories(**filters)]

    def stored_pairs(
        self, *, iteration: int | None = None, kind: str | None = None, stage: str | None = None
    ) -> Iterator[StoredPair]:
        where, args = [], []
        for column, value in (("iteration", iteration), ("kind", kind), ("stage", stage)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = (
            "SELECT id, iteration, kind, chosen, rejected, weight, sft_weight, metadata FROM pairs"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._guard():
            rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
            wanted = sorted({r[3] for r in rows} | {r[4] for r in rows})
            by_id = self._trajectories_by_id(wanted)
        for id_, iteration_, kind_, chosen, rejected, weight, sft_weight, meta in rows:
            pair = Pair(by_id[chosen], by_id[rejected], kind_, weight, sft_weight, json.loads(meta))
            yield StoredPair(id_, iteration_, chosen, rejected, pair)

    def _trajectories_by_id(self, ids: list[int]) -> dict[int, Trajectory]:
        tasks = self._tasks()
        out: dict[int, Trajectory] = {}
        for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[start : start + 500]
            rows = self._db.execute(
                f"SELECT {self._columns} FROM trajectories "
                f"WHERE id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for row in rows:
                out[row[0]] = self._row_to_stored(row, tasks).trajectory
        return out

    def pairs(self, **filters: Any) -> list[Pair]:
        return [s.pair for s in self.stored_pairs(**filters)]

    def count(self, table: str = "trajectories") -> int:
        if table not in ("tasks", "trajectories", "pairs", "synthesized"):
            raise ValueError(
                f"Unknown table {table!r}: use tasks, trajectories, pairs or synthesized."
            )
        with self._guard():
            return int(self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    def stage_rows(self, stage: str) -> int:
        """Trajectories stored by pipeline stage `stage` (tagged `stage` or `stage-<split>`)."""
        with self._guard():
            # A range rather than LIKE or substr, so the count reads the stage index only.
            row = self._db.execute(
                "SELECT COUNT(*) FROM trajectories WHERE stage = ? OR (stage >= ? AND stage < ?)",
                (stage, stage + "-", stage + "."),  # "." sorts right after "-"
            ).fetchone()
        return int(row[0])

    def task_rewards(self, stage: str) -> dict[str, list[float]]:
        """Task id -> the rewards of the trajectories stage tag `stage` stored (e.g.
        `eval-1-test_unseen`), in insertion order; only those two columns are read."""
        with self._guard():
            rows = self._db.execute(
                "SELECT task, reward FROM trajectories WHERE stage = ? ORDER BY id", (stage,)
            ).fetchall()
        rewards: dict[str, list[float]] = {}
        for task, reward in rows:
            rewards.setdefault(task, []).append(float(reward))
        return rewards

    def stages(self, table: str = "trajectories") -> list[str]:
        """The stage tags of the stored trajectories (`explore-1-target`, `eval-0-valid`, ...)
        or, with `table="pairs"`, of the stored pairs (`dpo-1-target`, ...)."""
        if table not in ("trajectories", "pairs"):
            raise ValueError(f"Unknown table {table!r}: use trajectories or pairs.")
        with self._guard():
            rows = self._db.execute(f"SELECT DISTINCT stage FROM {table} ORDER BY stage")
            return [r[0] for r in rows.fetchall()]

    def agents(self) -> list[str]:
        """The agents of the stored trajectories (`expert`, `target`, `failure`, ...)."""
        with self._guard():
            rows = self._db.execute("SELECT DISTINCT agent FROM trajectories ORDER BY agent")
            return [r[0] for r in rows.fetchall()]

    def iterations(self) -> list[int]:
        with self._guard():
            rows = self._db.execute(
                "SELECT DISTINCT iteration FROM trajectories ORDER BY iteration"
            ).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (the batch leaves no trace)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
