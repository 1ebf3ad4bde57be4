"""The store's synthesized tasks: provenance, a rerun stage replacing its rows, older stores."""

from __future__ import annotations

import sqlite3

from coevo.store import Store
from coevo.trajectory import Task


def tasks(n: int, prefix: str = "toy/synth/1") -> list[Task]:
    return [
        Task(f"{prefix}-{i}", "toy", "train", f"Type w{i}.", {"word": f"w{i}"}) for i in range(n)
    ]


def test_synthesized_tasks_keep_their_provenance_and_a_rerun_replaces_its_stage(tmp_path):
    with Store(tmp_path) as store:
        store.add_synthesized(
            [(t, {"signal": {"kind": "rare"}}) for t in tasks(2)], stage="evolve-1", round=1
        )
        store.add_synthesized(
            [(t, {"n": 1}) for t in tasks(1, "toy/synth/2")], stage="evolve-2", round=2
        )
        # evolve-2 ran again after a kill: its rows are replaced, not added to.
        store.add_synthesized(
            [(t, {"n": 2}) for t in tasks(1, "toy/synth/2")], stage="evolve-2", round=2
        )
        rows = store.synthesized()
        assert [(r.task.id, r.stage, r.round) for r in rows] == [
            ("toy/synth/1-0", "evolve-1", 1),
            ("toy/synth/1-1", "evolve-1", 1),
            ("toy/synth/2-0", "evolve-2", 2),
        ]
        assert rows[0].provenance == {"signal": {"kind": "rare"}} and rows[2].provenance == {"n": 2}
        assert rows[0].task == tasks(1)[0]
        assert [r.task.id for r in store.synthesized(stage="evolve-2")] == ["toy/synth/2-0"]
        assert store.count("synthesized") == 3


def test_an_older_store_gains_the_table_and_reads_without_it(tmp_path):
    with Store(tmp_path):
        pass
    con = sqlite3.connect(tmp_path / "store.sqlite")
    con.execute("DROP TABLE synthesized")  # as a store from before agent_data
    con.commit()
    con.close()
    with Store(tmp_path, readonly=True) as old:
        assert old.synthesized() == []
    with Store(tmp_path) as store:  # opened for writing: migrated
        store.add_synthesized([(tasks(1)[0], {})], stage="evolve-1", round=1)
        assert len(store.synthesized()) == 1
