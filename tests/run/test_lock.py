"""One process per run directory: a second writer is refused, kill -9 frees, readers still read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from coevo.analysis.compare import compare
from coevo.cli import app
from coevo.config import build
from coevo.methods.runner import execute
from coevo.run.lock import FILENAME, lock_run_dir
from coevo.run.pipeline import RunDirError
from coevo.run.recipe import RunConfig
from coevo.store import Store

ROOT = Path(__file__).resolve().parents[1]

# A whole (short) SFT run on the toy env: experts, model, sft-target, eval-0.
TINY = {
    "env": {"name": "tests.toy_env:ToyEnv", "options": {}},
    "model": {"size": "nano", "max_length": 512},
    "method": "sft",
    "sft": {"epochs": 1, "batch_size": 8, "optim": {"lr": 3e-3}, "progress": False},
    "eval": {"sampling": {"max_new_tokens": 8}, "batch_size": 16},
}

# Another process: take the lock, run `extra` (the half-done work of a run), say so, then wait.
HOLDER = """
import sys, time
from coevo.run.lock import lock_run_dir
lock = lock_run_dir(sys.argv[1])
{extra}
print("locked", flush=True)
time.sleep(300)
"""


@contextmanager
def holder(run_dir: Path, extra: str = "") -> Iterator[subprocess.Popen]:
    """A second process holding `run_dir`'s lock until the block ends (then kill -9)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(extra=extra), str(run_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "locked", "the holder never took the lock"
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


def test_a_second_process_is_refused_naming_the_holder_and_kill_9_frees_it(tmp_path):
    run_dir = tmp_path / "run"
    with holder(run_dir) as proc:
        with pytest.raises(RunDirError) as refused:
            lock_run_dir(run_dir)
        message = str(refused.value)
        assert f"process {proc.pid}" in message and str(run_dir) in message
        assert message.count(". ") == 0  # one sentence

        proc.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops the lock
        proc.wait()
        with lock_run_dir(run_dir) as lock:
            assert lock.run_dir == run_dir
            assert (run_dir / FILENAME).read_text().strip() == str(os.getpid())
    # Released: the file stays (never deleted, see coevo.run.lock) but names no one.
    assert (run_dir / FILENAME).read_text() == ""
    lock_run_dir(run_dir).release()


def test_execute_is_refused_before_writing_anything(tmp_path):
    run_dir = tmp_path / "run"
    with holder(run_dir) as proc, pytest.raises(RunDirError, match=f"process {proc.pid}"):
        execute(build(RunConfig, TINY), run_dir, quiet=True)
    assert sorted(p.name for p in run_dir.iterdir()) == [FILENAME]  # no run.json, config, store


def test_run_and_demo_commands_refuse_in_one_sentence(tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(TINY))
    run_dir, demo_dir = tmp_path / "run", tmp_path / "demo"
    with holder(run_dir) as proc:
        result = CliRunner().invoke(app, ["run", str(config), "--out", str(run_dir)])
        assert result.exit_code == 2
        assert f"is in use by process {proc.pid}" in result.output
        assert "Traceback" not in result.output
    # The demo's first run directory is DIR/sft.
    with holder(demo_dir / "sft") as proc:
        result = CliRunner().invoke(app, ["demo", "--out", str(demo_dir)])
        assert result.exit_code == 2
        assert f"is in use by process {proc.pid}" in result.output


def test_compare_and_export_read_while_a_run_holds_it_and_the_rerun_resumes(tmp_path):
    run_dir = execute(build(RunConfig, TINY), tmp_path / "run", quiet=True)
    tables = compare([run_dir])
    with Store(run_dir, create=False) as store:
        committed = store.count("trajectories")
    # The holder is a run mid-way: a stage without its manifest yet, and a batch of rows in an
    # open (uncommitted) transaction.
    columns = (
        "run, iteration, stage, agent, env, task, split, reward, terminated, truncated, steps, "
        "turns, metadata, content, created"
    )
    half_done = f"""
import sqlite3
from pathlib import Path
run = Path(sys.argv[1])
(run / "stages" / "eval-1").mkdir()
(run / "stages" / "eval-1" / "partial.json").write_text("{{")
db = sqlite3.connect(run / "store.sqlite", isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO trajectories ({columns}) SELECT {columns} FROM trajectories")
"""
    with holder(run_dir, half_done):
        assert compare([run_dir]) == tables  # finished stages only
        result = CliRunner().invoke(app, ["compare", str(run_dir)])
        assert result.exit_code == 0, result.output
        result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "jsonl"])
        assert result.exit_code == 0, result.output
        lines = (run_dir / "export/jsonl/trajectories.jsonl").read_text().splitlines()
        assert len(lines) == committed > 0  # committed rows only
    # The holder died by kill -9 (end of `holder`): the rerun takes the directory and resumes,
    # every stage finished before, its uncommitted batch gone.
    finished = sorted(p.parent.name for p in (run_dir / "stages").glob("*/manifest.json"))
    execute(build(RunConfig, TINY), run_dir, quiet=True)
    assert sorted(p.parent.name for p in (run_dir / "stages").glob("*/manifest.json")) == finished
    with Store(run_dir, create=False) as store:
        assert store.count("trajectories") == committed
