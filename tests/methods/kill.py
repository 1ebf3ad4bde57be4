"""Kill -9 a `coevo run` at a chosen moment: the resume tests' common first half."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_until_rows(
    recipe: Path,
    run: Path,
    query: str,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    stop_at: tuple[str, str, str] | None = None,
) -> list[tuple]:
    """Start `coevo run recipe --out run` in its own process group, poll its store with `query`
    and kill the group (SIGKILL) as soon as the query returns rows, or when it gives up after
    `timeout` seconds. Returns those rows (empty: never reached); a run that ends first is an
    error that quotes the end of its output.

    `stop_at` (target, key=value, before|after: `tests.methods.stopping`) makes the run stop
    itself at that call, so that on a busy machine it cannot run past the moment the kill is
    meant for while the poller waits for a core."""
    run_args = ["run", str(recipe), "--out", str(run)]
    if stop_at is None:
        cmd = [sys.executable, "-m", "coevo.cli", *run_args]
    else:
        cmd = [sys.executable, "-m", "tests.methods.stopping", *stop_at, *run_args]
    log = run.parent / f"{run.name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True
        )
    db = run / "store.sqlite"
    rows: list[tuple] = []
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            ended = proc.poll()  # read before the query: rows written at the end still count
            if db.exists():
                con = sqlite3.connect(db)
                try:
                    rows = con.execute(query).fetchall()
                except sqlite3.OperationalError:  # the schema is not there yet
                    rows = []
                finally:
                    con.close()
            if rows or ended is not None:
                break
            time.sleep(0.05)
    finally:
        ended = proc.poll()
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if not rows and ended is not None:
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"the run ended (exit {ended}) before {query!r} found rows:\n{tail}")
    return rows
