"""The trajectory store: batches are atomic, a kill -9 loses nothing committed, exports round-trip."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coevo.export import (
    export,
    read_jsonl,
    read_parquet_pairs,
    read_parquet_trajectories,
    turns_from_sharegpt,
)
from coevo.store import Store, StoreError
from coevo.trajectory import Pair, Task, Trajectory, Turn

ROOT = Path(__file__).resolve().parents[1]


def make_trajectory(
    i: int, reward: float, agent: str = "target", split: str = "train"
) -> Trajectory:
    task = Task(
        f"toy/{split}/{i % 3}", "toy", split, f"Type word {i % 3}.", {"word": "fig", "n": [1, 2]}
    )
    turns = (
        Turn("user", "Type the word.\n\nInstruction: Type fig."),
        Turn("assistant", "Thought: I check.\nAction: look"),
        Turn("user", "Observation: The word is fig."),
        Turn("assistant", f"Thought: café {i}.\nAction: type[f{i}]"),
    )
    meta = {"seed": i, "sampling": {"temperature": 0.7}, "info": {"breakdown": [1, 0.5]}}
    return Trajectory(task, agent, turns, reward, True, False, 2, meta)


def test_trajectories_and_pairs_round_trip(tmp_path):
    trajs = [make_trajectory(i, i / 10) for i in range(6)]
    expert = make_trajectory(0, 1.0, agent="expert").with_metadata(seed=None)
    with Store(tmp_path / "run") as store:
        ids = store.add_trajectories(trajs, iteration=1)
        assert ids == sorted(ids) and len(ids) == 6
        pairs = [
            Pair(expert, trajs[0], "expert_vs_target", 0.5, 0.1, {"why": "test"}),
            Pair(trajs[3], trajs[0], "failure_vs_failure"),
        ]
        store.add_pairs(pairs, iteration=1)
        assert store.count("trajectories") == 7  # the expert joined; trajs[0], trajs[3] reused
        assert store.trajectories(iteration=1, agent="target") == trajs
        assert store.trajectories(max_reward=0.25) == trajs[:3]
        assert store.trajectories(task="toy/train/1") == [trajs[1], trajs[4]]
        assert store.pairs() == pairs
        assert store.pairs(kind="failure_vs_failure") == pairs[1:]
        assert store.iterations() == [1]
    with Store(tmp_path / "run") as reopened:
        assert reopened.trajectories(agent="target") == trajs
        assert reopened.label == "run"


def test_a_batch_another_process_commits_while_one_reads_never_breaks_the_read(tmp_path):
    """Processes of one run share the store: a batch of new tasks and trajectories committed
    between a reader's queries (here forced between them) is read whole or not at all."""
    with Store(tmp_path / "run") as store, Store(tmp_path / "run") as other:
        store.add_trajectories([make_trajectory(0, 0.0)], stage="eval-0")
        late = make_trajectory(1, 1.0, split="test_seen")  # a task the reader has not seen
        execute = store._db.execute
        calls = []

        class Db:  # the reader's connection, with the other process's commit after a query
            def execute(self, sql, *args):
                got = execute(sql, *args)
                calls.append(sql)
                if len(calls) == 1:
                    other.add_trajectories([late], stage="eval-0")
                return got

        db, store._db = store._db, Db()
        try:
            read = store.trajectories(stage="eval-0")
        finally:
            store._db = db
        assert len(calls) == 2  # the rows and the tasks: the commit came between them
        assert read in ([make_trajectory(0, 0.0)], [make_trajectory(0, 0.0), late])


def test_a_failing_batch_leaves_no_trace(tmp_path):
    good = [make_trajectory(i, 1.0) for i in range(3)]
    bad = good[0].with_metadata(unserialisable=object())
    with Store(tmp_path) as store:
        store.add_trajectories(good)
        with pytest.raises(TypeError):
            store.add_trajectories([*good, bad])
        assert store.count() == 3


def test_opening_a_missing_store_read_only_names_the_fix(tmp_path):
    with pytest.raises(StoreError, match="No store at"):
        Store(tmp_path / "nowhere", create=False)


WRITER = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{root!r}, {tests!r}]
    from coevo.store import Store
    from test_store import make_trajectory

    store = Store({path!r})
    batch = [make_trajectory(i, 0.5) for i in range({size})]
    for n in range(10_000):
        print("begin", n, flush=True)
        store.add_trajectories(batch, iteration=n)
        print("committed", n, flush=True)
    """
)


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.02])
def test_kill_9_mid_batch_loses_nothing_committed(tmp_path, delay):
    size = 400
    script = WRITER.format(
        root=str(ROOT / "src"), tests=str(ROOT / "tests"), path=str(tmp_path), size=size
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    committed = -1
    try:
        for line in child.stdout:
            word, n = line.split()
            if word == "committed":
                committed = int(n)
            elif word == "begin" and int(n) == 3:
                time.sleep(delay)  # land the kill inside batch 3's transaction
                os.kill(child.pid, signal.SIGKILL)
                break
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert committed == 2
    with Store(tmp_path) as store:
        count = store.count()
        assert count % size == 0  # never half a batch
        assert count >= (committed + 1) * size  # every acknowledged batch is there
        assert store.iterations() == list(range(count // size))
        assert len(store.trajectories(iteration=0)) == size


def test_exports_round_trip(tmp_path):
    trajs = [make_trajectory(i, i / 10, split="test_seen") for i in range(4)]
    expert = make_trajectory(7, 1.0, agent="expert")
    expert = Trajectory(trajs[1].task, "expert", expert.turns, 1.0, True, False, 2, {})
    pairs = [Pair(expert, trajs[1], "expert_vs_target", 1.0, 0.1), Pair(trajs[3], trajs[0], "ff")]
    with Store(tmp_path / "run") as store:
        store.add_trajectories(trajs, iteration=2)
        store.add_pairs(pairs, iteration=2)
        everything = store.trajectories()

        export(store, "jsonl", tmp_path / "jsonl")
        lines = read_jsonl(tmp_path / "jsonl" / "trajectories.jsonl")
        assert [Trajectory.from_dict(d) for d in lines] == everything
        assert [Pair.from_dict(d) for d in read_jsonl(tmp_path / "jsonl" / "pairs.jsonl")] == pairs
        assert {d["iteration"] for d in lines} == {2}

        export(store, "parquet", tmp_path / "pq")
        assert read_parquet_trajectories(tmp_path / "pq" / "trajectories.parquet") == everything
        assert read_parquet_pairs(tmp_path / "pq" / "pairs.parquet") == pairs

        (written,) = export(store, "sharegpt", tmp_path / "sg")
        items = json.loads(written.path.read_text())
        assert [turns_from_sharegpt(item) for item in items] == [t.turns for t in everything]
        assert items[0]["conversations"][0]["from"] == "human"
        assert items[0]["conversations"][1]["from"] == "gpt"

        (written,) = export(store, "trl-dpo", tmp_path / "dpo")
        rows = read_jsonl(written.path)
        for row, pair in zip(rows, pairs, strict=True):
            assert row["prompt"][-1]["role"] == "user"
            assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
            as_turns = [Turn(m["role"], m["content"]) for m in row["prompt"] + row["chosen"]]
            assert tuple(as_turns) == pair.chosen.turns
            as_turns = [Turn(m["role"], m["content"]) for m in row["prompt"] + row["rejected"]]
            assert tuple(as_turns) == pair.rejected.turns
            assert (row["kind"], row["weight"], row["sft_weight"]) == (
                pair.kind,
                pair.weight,
                pair.sft_weight,
            )
        # trajs[3] and trajs[0] share the first exchange: it belongs to the prompt.
        assert len(rows[1]["prompt"]) == 3


def test_empty_store_exports_empty_files(tmp_path):
    with Store(tmp_path) as store:
        for fmt in ("jsonl", "parquet", "sharegpt", "trl-dpo"):
            for written in export(store, fmt, tmp_path / fmt):
                assert written.path.exists() and written.rows == 0
        assert read_parquet_trajectories(tmp_path / "parquet" / "trajectories.parquet") == []


def test_export_command(tmp_path):
    from typer.testing import CliRunner

    from coevo.cli import app

    run = tmp_path / "run"
    with Store(run) as store:
        store.add_trajectories([make_trajectory(i, 0.5) for i in range(3)])
    runner = CliRunner()
    result = runner.invoke(app, ["export", str(run), "--format", "sharegpt"])
    assert result.exit_code == 0, result.output
    sharegpt = run / "export" / "sharegpt" / "sharegpt.json"
    assert f"3 trajectories -> {sharegpt}" in result.output
    assert len(json.loads((run / "export" / "sharegpt" / "sharegpt.json").read_text())) == 3
    result = runner.invoke(app, ["export", str(run), "--format", "csv"])
    assert result.exit_code == 2 and "unknown export format 'csv'" in result.output
    result = runner.invoke(app, ["export", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "No store at" in result.output
    assert not (tmp_path / "missing").exists()  # a typo never creates an empty run


def test_stage_tags_separate_batches_of_one_iteration(tmp_path):
    with Store(tmp_path) as store:
        store.add_trajectories([make_trajectory(0, 0.5)], iteration=1, stage="explore-1-target")
        store.add_trajectories([make_trajectory(1, 1.0)], iteration=1, stage="eval-1-test_seen")
        explored = store.trajectories(stage="explore-1-target")
        assert [t.task.id for t in explored] == ["toy/train/0"]
        assert len(store.trajectories(iteration=1)) == 2
        pair = Pair(make_trajectory(3, 1.0), make_trajectory(6, 0.0), "expert_vs_target")
        store.add_pairs([pair], iteration=1, stage="dpo-1-target")
        assert len(store.pairs(stage="dpo-1-target")) == 1 and store.pairs(stage="other") == []


def filled_store(path: Path) -> Path:
    with Store(path) as store:
        for n in range(10):
            batch = [make_trajectory(i, 0.5) for i in range(40)]
            store.add_trajectories(batch, iteration=n, stage=f"explore-{n}-target")
    return path / "store.sqlite"


def test_a_truncated_store_is_one_sentence_naming_the_file_and_is_left_as_it_was(tmp_path):
    db = filled_store(tmp_path)
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])  # a disk that filled up
    before = db.read_bytes()
    with pytest.raises(StoreError) as caught:
        Store(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{str(db)!r} is damaged (SQLite: database disk image is malformed)")
    assert "move it and any store.sqlite-wal and store.sqlite-shm files" in message
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence
    assert db.read_bytes() == before  # never written to, let alone replaced


def test_damage_found_while_reading_is_the_same_sentence(tmp_path):
    db = filled_store(tmp_path)
    store = Store(tmp_path)
    assert store.stage_rows("explore-3-target") == 40
    data = bytearray(db.read_bytes())
    data[8192:-4096] = b"\xff" * (len(data) - 8192 - 4096)  # every page past the schema's
    db.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="is damaged"):
        store.trajectories(stage="explore-3-target")
    store.close()


def test_stage_rows_counts_a_stage_and_its_splits_only(tmp_path):
    with Store(tmp_path) as store:
        for stage in ("eval-1-test_seen", "eval-1-test_unseen", "eval-10-test_seen", "eval-1"):
            store.add_trajectories([make_trajectory(0, 1.0)], iteration=1, stage=stage)
        assert store.stage_rows("eval-1") == 3
        assert store.stage_rows("eval-10") == 1
        assert store.stage_rows("eval-2") == 0


def sampled_trajectory(i: int, sample: int) -> Trajectory:
    plain = make_trajectory(i, 0.5)
    turns = tuple(
        Turn(t.role, t.text, token_ids=(i, 7, 9), logprobs=(-0.5, -1.25, -2.0))
        if t.role == "assistant"
        else t
        for t in plain.turns
    )
    return Trajectory(plain.task, "target", turns, 0.5, True, False, 2, plain.metadata, sample)


def test_sampled_tokens_and_sample_indices_survive_the_store_and_exports(tmp_path):
    trajs = [sampled_trajectory(i, sample=i % 2) for i in range(4)]
    with Store(tmp_path / "run") as store:
        store.add_trajectories(trajs, iteration=1)
        assert store.trajectories() == trajs
        assert [t.sample for t in store.trajectories()] == [0, 1, 0, 1]
        export(store, "jsonl", tmp_path / "jsonl")
        lines = read_jsonl(tmp_path / "jsonl" / "trajectories.jsonl")
        assert [Trajectory.from_dict(d) for d in lines] == trajs
        export(store, "parquet", tmp_path / "pq")
        assert read_parquet_trajectories(tmp_path / "pq" / "trajectories.parquet") == trajs


def test_a_store_from_before_the_sample_column_is_brought_up_to_date(tmp_path):
    import sqlite3

    old = make_trajectory(0, 0.5).with_metadata(sample=3)  # where the index used to live
    with Store(tmp_path) as store:
        store.add_trajectories([old])
    with sqlite3.connect(tmp_path / "store.sqlite") as db:
        db.execute("ALTER TABLE trajectories DROP COLUMN sample")
    with Store(tmp_path, create=False) as store:
        (back,) = store.trajectories()
    assert back.sample == 3 and back.turns == old.turns


def test_a_read_only_store_reads_an_old_store_and_changes_nothing(tmp_path):
    import hashlib
    import sqlite3

    old = make_trajectory(0, 0.5)
    with Store(tmp_path) as store:
        store.add_trajectories([old])
        store.add_pairs([Pair(old, make_trajectory(3, 0.0), "expert_vs_target")])
    with sqlite3.connect(tmp_path / "store.sqlite") as db:
        db.execute("ALTER TABLE trajectories DROP COLUMN sample")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def digest() -> str:
        return hashlib.sha256((tmp_path / "store.sqlite").read_bytes()).hexdigest()

    before = digest()
    with Store(tmp_path, readonly=True) as store:
        assert [t.turns for t in store.trajectories()][0] == old.turns
        assert store.trajectories()[0].sample == 0
        assert store.pairs()[0].kind == "expert_vs_target"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.add_trajectories([old])
    assert digest() == before  # not migrated: the older coevo that wrote it still reads it
    with pytest.raises(StoreError, match="No store at"):
        Store(tmp_path / "missing", readonly=True)
    assert not (tmp_path / "missing").exists()


def test_export_filters_and_says_what_each_format_wrote(tmp_path):
    from typer.testing import CliRunner

    from coevo.cli import app

    run = tmp_path / "run"
    expert = make_trajectory(0, 1.0, agent="expert")
    won, lost = make_trajectory(3, 1.0), make_trajectory(6, 0.2)
    seen = make_trajectory(1, 0.5, split="test_seen")
    with Store(run) as store:
        store.add_trajectories([expert], stage="experts")
        store.add_trajectories([won, lost], iteration=1, stage="explore-1-target")
        store.add_trajectories([seen], iteration=1, stage="eval-1-test_seen")
        store.add_pairs([Pair(expert, lost, "expert_vs_target")], iteration=1, stage="dpo-1-target")
    runner = CliRunner()

    def exported(*args: str) -> tuple[str, list[dict]]:
        out = tmp_path / "out" / "-".join(args)
        result = runner.invoke(app, ["export", str(run), "-o", str(out), *args])
        assert result.exit_code == 0, result.output
        return result.output, read_jsonl(out / "trajectories.jsonl")

    # ETO-style SFT data: the experts and the successes.
    _, rows = exported("--min-reward", "1")
    assert [(r["agent"], r["reward"]) for r in rows] == [("expert", 1.0), ("target", 1.0)]
    _, rows = exported("--agent", "target", "--split", "train")
    assert [r["reward"] for r in rows] == [1.0, 0.2]
    output, rows = exported("--stage", "eval-1")  # a stage's prefix: every split of eval-1
    assert [r["task"]["split"] for r in rows] == ["test_seen"]
    assert "0 pairs" in output
    output, _ = exported("--stage", "dpo-1-target")
    assert "1 pair ->" in output
    # Each format says what it wrote: ShareGPT holds trajectories only, TRL's DPO data pairs.
    result = runner.invoke(app, ["export", str(run), "-f", "trl-dpo"])
    assert "1 pair ->" in result.output and "trajector" not in result.output
    result = runner.invoke(app, ["export", str(run), "-f", "sharegpt", "--min-reward", "1"])
    assert "2 trajectories ->" in result.output and "pairs" not in result.output
    result = runner.invoke(app, ["export", str(run), "--split", "valid"])
    assert result.exit_code == 2 and "unknown split 'valid'" in result.output
    # A stage or agent the run does not hold is a typo, not an empty export: it names theirs.
    result = runner.invoke(
        app, ["export", str(run), "-o", str(tmp_path / "typo"), "--stage", "dpo-2"]
    )
    assert result.exit_code == 2 and "no stage 'dpo-2'" in result.output
    assert "dpo-1-target" in result.output and not (tmp_path / "typo").exists()
    result = runner.invoke(app, ["export", str(run), "--agent", "failur"])
    assert result.exit_code == 2 and "its agents: expert, target" in result.output
