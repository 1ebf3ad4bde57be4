"""Stage records: what a stage writes into its manifest reads back the same, old shapes too."""

from __future__ import annotations

import json

import pytest

from coevo.run.records import (
    DpoRecord,
    EpisodeStats,
    EvalRecord,
    ExpertsRecord,
    ExploreRecord,
    ModelRecord,
    SftRecord,
    read,
)

STATS = EpisodeStats(0.5, 0.25, 8, 3.5, 0.125, 0.0)
RECORDS = [
    ExpertsRecord(10, 9, ["shop/train/3: no gold path"]),
    SftRecord(9, 12, 0.25),
    ModelRecord({"size": "nano", "parameters": 1000}, SftRecord(9, 4, 1.5)),
    DpoRecord(6, {"expert_vs_target": 6}, 3, {"loss": 0.5}),
    DpoRecord(0, skipped=True),
    ExploreRecord(1, 16, 0.5, {"target": STATS}, {"target": {"success": 0.25}}),
    EvalRecord(2, {"test_seen": STATS, "test_unseen": EpisodeStats(0.0, 0.0)}),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_reads_back_from_its_manifest_json(record):
    outputs = json.loads(json.dumps(record.to_dict()))
    assert outputs["kind"] == record.KIND
    assert read(outputs) == record == type(record).from_dict(outputs)


def test_the_manifest_shapes_runs_have_always_written_read_the_same():
    evaluated = {
        "kind": "eval",
        "iteration": 2,
        "splits": {"test_seen": {"reward": 0.5, "success": 0}},
    }
    record = read(evaluated)
    assert isinstance(record, EvalRecord)
    assert record.splits["test_seen"] == EpisodeStats(0.5, 0.0)
    assert record.splits["test_seen"].mean_steps is None  # recorded before it was kept
    assert record.to_dict() == {
        **evaluated,
        "splits": {"test_seen": {"reward": 0.5, "success": 0, "n": 0}},
    }
    explored = read({"kind": "explore", "iteration": 1, "outcomes": {"target": {"failure": 1.0}}})
    assert explored == ExploreRecord(1, outcomes={"target": {"failure": 1.0}})
    model = {"kind": "model", "out": "x", "size": "nano", "pretrain": {"examples": 8, "steps": 4}}
    assert read(model) == ModelRecord({"out": "x", "size": "nano"}, SftRecord(8, 4))
    assert read({"tasks": 3, "solved": 3}) is None  # experts before records had a kind
