"""Kill -9 a `coevo run` at a chosen moment: the resume tests' common first half."""

from __future__ import annotations

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
    `timeout` seconds or the run ends first. Returns those rows (empty: never reached).

    `stop_at` (target, key=value, before|after: `tests.methods.stopping`) makes the run stop
    itself at that call, so that on a busy machine it cannot run past the moment the kill is
    meant for while the poller waits for a core."""
    run_args = ["run", str(recipe), "--out", str(run)]
    if stop_at is None:
        cmd = [sys.executable, "-m", "coevo.cli", *run_args]
    else:
        cmd = [sys.executable, "-m", "tests.methods.stopping", *stop_at, *run_args]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    db = run / "store.sqlite"
    rows: list[tuple] = []
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None:
            if db.exists():
                con = sqlite3.connect(db)
                try:
                    rows = con.execute(query).fetchall()
                except sqlite3.OperationalError:  # the schema is not there yet
                    rows = []
                finally:
                    con.close()
                if rows:
                    break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return rows
