from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from coevo.analysis.archive import (
    archive,
    finished_stages,
    rewards_file,
    stage_rewards,
    task_rewards,
)
from coevo.analysis.compare import compare, to_markdown
from coevo.analysis.report import write_report
from coevo.cli import app
from tests.analysis.test_compare import fake_run
from tests.analysis.test_paired import store_eval

REWARDS = rewards_file("eval")


def grid(tmp_path):
    sft = fake_run(tmp_path / "runs", "sft-s0", "sft", 0, 0.5, 0.5)
    eto = fake_run(tmp_path / "runs", "eto-s0", "eto", 0, 0.75, 0.5)
    store_eval(sft, "eval-2-test_seen", [0, 1, 0, 1])
    store_eval(eto, "eval-2-test_seen", [1, 1, 0, 1])
    store_eval(eto, "explore-1-target", [0.7, 1, None, 0])  # (store_eval's ids: test_seen's)
    # A trainer's log and a checkpoint: the log is kept, the checkpoint is not.
    dpo = eto / "stages" / "dpo-1-target"
    (dpo / "checkpoints" / "step-2").mkdir(parents=True)
    (dpo / "checkpoints" / "step-2" / "model.safetensors").write_bytes(b"\0" * 4096)
    (dpo / "checkpoints" / "step-2" / "metrics.jsonl").write_text('{"step": 2}\n')
    (dpo / "metrics.jsonl").write_text(
        '{"step": 1, "dpo_loss": 0.69}\n{"step": 2, "dpo_loss": 0.5}\n'
    )
    return sft, eto


def test_an_archive_tabulates_like_its_run_without_the_store_or_weights(tmp_path):
    runs = grid(tmp_path)
    kept = [archive(run, tmp_path / "archive" / run.name) for run in runs]
    # What the archive holds: no store, no checkpoint; the manifests, the log, the rewards.
    files = {str(p.relative_to(kept[1])) for p in kept[1].rglob("*") if p.is_file()}
    assert files == {
        "config.yaml",
        REWARDS,
        rewards_file("explore"),
        "stages/eval-0/manifest.json",
        "stages/eval-2/manifest.json",
        "stages/dpo-1-target/metrics.jsonl",
    }
    assert json.loads((kept[1] / REWARDS).read_text()) == {
        "eval-2-test_seen": {f"shop/test_seen/t{i}": [r] for i, r in enumerate([1, 1, 0, 1])}
    }
    # The explorations' rewards per task too (Table 2's task-paired test), and only theirs.
    tasks = {"shop/test_seen/t0": [0.7], "shop/test_seen/t1": [1.0], "shop/test_seen/t3": [0.0]}
    explored = {"explore-1-target": tasks}
    assert stage_rewards(kept[1], "explore") == stage_rewards(runs[1], "explore") == explored
    assert stage_rewards(kept[0], "explore") == {}  # sft explored nothing
    assert task_rewards(kept[1], "explore-1-target") == explored["explore-1-target"]
    assert task_rewards(kept[1], "eval-2-test_seen")["shop/test_seen/t2"] == [0.0]
    with pytest.raises(ValueError, match="Unknown stage kind 'dpo'"):
        stage_rewards(kept[1], "dpo")
    assert finished_stages(kept[1]) == finished_stages(runs[1]) == 2
    # The same tables, paired differences included, from the archives as from the runs.
    from_runs, from_archives = compare(list(runs)), compare(kept)
    assert from_archives["paired"]["rows"] == from_runs["paired"]["rows"]
    assert from_archives["paired"]["rows"]["eto - sft"]["shop test_seen"]["mean"] == 0.25
    assert to_markdown(from_archives) == to_markdown(from_runs)
    # The report reads an archive too: its training curve, and a note for the episodes.
    page = write_report(kept, tmp_path / "report").read_text()
    assert "No training logs" not in page and "No played episodes stored" in page
    assert (tmp_path / "report" / "figures" / "training.png").is_file()
    # An archive of an archive keeps the rewards (read from its file, as there is no store).
    again = archive(kept[1], tmp_path / "again")
    assert stage_rewards(again) == stage_rewards(runs[1])


def test_rearchiving_replaces_the_old_archive_whole(tmp_path):
    sft, eto = grid(tmp_path)
    dest = archive(eto, tmp_path / "kept" / "eto-s0")
    (dest / "stale.txt").write_text("from an older archive")
    store_eval(eto, "eval-3-test_seen", [0, 0, 0, 0])
    archive(eto, dest)
    assert not (dest / "stale.txt").exists()
    assert set(stage_rewards(dest)) == {"eval-2-test_seen", "eval-3-test_seen"}
    assert sorted(p.name for p in dest.parent.iterdir()) == ["eto-s0"]  # no leftovers


def test_a_damaged_rewards_file_reads_as_no_rewards(tmp_path):
    _, eto = grid(tmp_path)
    dest = archive(eto, tmp_path / "archive")
    (dest / REWARDS).write_text("{not json")
    assert stage_rewards(dest) == {}
    (dest / REWARDS).write_text(json.dumps({"eval-2-test_seen": {"t0": ["high"]}}))
    assert stage_rewards(dest) == {}
    # compare still stands: the paired table notes the missing tasks instead of failing.
    tables = compare([dest])
    assert tables["rows"]["eto"]["shop test_seen"] == [0.75]


def test_archive_refuses_a_path_that_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a coevo run directory"):
        archive(tmp_path, tmp_path / "dest")
    _, eto = grid(tmp_path)
    with pytest.raises(ValueError, match="onto itself"):
        archive(eto, eto)


def test_archive_command(tmp_path):
    _, eto = grid(tmp_path)
    runner = CliRunner()
    done = runner.invoke(app, ["archive", str(eto), str(tmp_path / "kept")])
    assert done.exit_code == 0, done.output
    assert "KiB" in done.stdout and (tmp_path / "kept" / REWARDS).is_file()
    refused = runner.invoke(app, ["archive", str(tmp_path / "nowhere"), str(tmp_path / "x")])
    assert refused.exit_code == 2 and "not a coevo run directory" in refused.output
