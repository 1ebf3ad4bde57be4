from __future__ import annotations

import json

import pytest
import yaml

from coevo.analysis.compare import compare, read_run, to_markdown


def fake_run(root, name, method, seed, seen, unseen, shares=None, valid=None, env="shop"):
    run = root / name
    (run / "stages").mkdir(parents=True)
    (run / "config.yaml").write_text(
        yaml.safe_dump({"method": method, "seed": seed, "env": {"name": env}})
    )

    def stage(stage_name, outputs):
        d = run / "stages" / stage_name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"outputs": outputs}))

    # An earlier eval that must be ignored in favour of the last one.
    stage(
        "eval-0",
        {"kind": "eval", "iteration": 0, "splits": {"test_seen": {"reward": 0.0, "success": 0}}},
    )
    splits = {
        "test_seen": {"reward": seen, "success": 0.0},
        "test_unseen": {"reward": unseen, "success": 0.0},
    }
    if valid is not None:
        splits["valid"] = {"reward": valid, "success": 0.0}
    stage("eval-2", {"kind": "eval", "iteration": 2, "splits": splits})
    if shares:
        stage("explore-1", {"kind": "explore", "iteration": 1, "outcomes": {"target": shares}})
    return run


def test_tables_by_hand(tmp_path):
    shares = {"success": 0.5, "hard_negative": 0.25, "failure": 0.25}
    runs = [
        fake_run(tmp_path, "a", "eto", 0, 0.50, 0.30, shares),
        fake_run(tmp_path, "b", "eto", 1, 0.60, 0.40),
        fake_run(tmp_path, "c", "sft", 0, 0.40, 0.20),
    ]
    assert read_run(runs[0]).final_iteration == 2
    tables = compare(runs)
    assert tables["rows"]["eto"]["shop test_seen"] == [0.5, 0.6]
    md = to_markdown(tables)
    # eto seen: mean 55.0, std of (50, 60) = 7.07 -> "55.0 ± 7.1"; average of 55 and 35 = 45.0.
    assert "| eto | 55.0 ± 7.1 | 35.0 ± 7.1 | 45.0 |" in md
    assert "| sft | 40.0 | 20.0 | 30.0 |" in md
    assert "| eto / target | 50.0 | 25.0 | 25.0 |" in md


def test_the_validation_slice_is_not_averaged(tmp_path):
    run = fake_run(tmp_path, "a", "sft", 0, 0.40, 0.20, valid=0.90)
    md = to_markdown(compare([run]))
    # test splits (40 + 20) / 2 = 30.0; with the valid column it would have been 50.0.
    row = next(line for line in md.splitlines() if line.startswith("| sft |"))
    assert row.split(" | ")[3].startswith("90.0")
    assert row.endswith(" 30.0 |")
    assert "average (test splits)" in md


def test_a_row_missing_a_test_column_has_no_average(tmp_path):
    runs = [
        fake_run(tmp_path, "a", "sft", 0, 0.40, 0.20),
        fake_run(tmp_path, "b", "sft", 0, 0.10, 0.10, env="sql"),
        fake_run(tmp_path, "c", "grpo", 0, 0.20, 0.30, env="sql"),
    ]
    md = to_markdown(compare(runs))
    # sft: (10 + 10 + 40 + 20) / 4 = 20.0; grpo has no shop cells, so no average beside it.
    assert next(line for line in md.splitlines() if line.startswith("| sft |")).endswith(" 20.0 |")
    assert next(line for line in md.splitlines() if line.startswith("| grpo |")).endswith(" - |")


def test_a_method_evaluated_only_at_its_sft_start_has_no_score_yet(tmp_path):
    runs = [fake_run(tmp_path, "s", "sft", 0, 0.40, 0.20)]
    for name, method, config in [
        ("e", "eto", {}),
        ("g", "grpo", {"grpo": {"steps": 4}}),
        ("r", "rft", {"rft": {"rounds": 1}}),
        ("z", "failure_agent", {"iterations": 0}),  # no iteration asked: eval-0 is its score
    ]:
        run = fake_run(tmp_path, name, method, 0, 0.40, 0.20)
        (run / "stages" / "eval-2" / "manifest.json").unlink()  # still training
        saved = yaml.safe_load((run / "config.yaml").read_text())
        (run / "config.yaml").write_text(yaml.safe_dump({**saved, **config}))
        runs.append(run)
    tables = compare(runs)
    assert tables["rows"]["sft"]["shop test_seen"] == [0.4]
    assert tables["rows"]["eto"] == tables["rows"]["grpo"] == tables["rows"]["rft"] == {}
    assert tables["rows"]["failure_agent"]["shop test_seen"] == [0.0]
    assert tables["iterations"]["eto"]["shop test_seen"] == {"0": [0.0]}
    md = to_markdown(tables)
    assert "| eto | - | - | - |" in md


def test_not_a_run_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a coevo run directory"):
        read_run(tmp_path)


def test_reward_and_behaviour_per_iteration(tmp_path):
    run = fake_run(tmp_path, "a", "eto", 0, 0.50, 0.30)
    stats = {"mean_steps": 3.5, "format_error_rate": 0.25, "invalid_action_rate": 0.1}
    d = run / "stages" / "eval-1"
    d.mkdir()
    splits = {"test_seen": {"reward": 0.4, "success": 0.0, **stats}}
    d.joinpath("manifest.json").write_text(
        json.dumps({"outputs": {"kind": "eval", "iteration": 1, "splits": splits}})
    )
    tables = compare([run])
    assert tables["iterations"]["eto"]["shop test_seen"] == {"0": [0.0], "1": [0.4], "2": [0.5]}
    md = to_markdown(tables)
    assert "| eto | shop test_seen | 0.0 | 40.0 | 50.0 |" in md
    # Only iteration 1 recorded behaviour; rates are shown as % of steps.
    assert "| eto | shop test_seen | 1 | 25.0 | 10.0 | 3.50 |" in md


def test_a_damaged_manifest_counts_as_an_unfinished_stage(tmp_path):
    run = fake_run(tmp_path, "a", "eto", 0, 0.50, 0.30)
    d = run / "stages" / "eval-3"
    d.mkdir()
    d.joinpath("manifest.json").write_text('{"outputs": {"kind": "ev')
    summary = read_run(run)
    assert summary.final_iteration == 2 and summary.final_eval["test_seen"].reward == 0.5


def test_cells_say_how_many_episodes_are_behind_them(tmp_path):
    runs = []
    for seed, reward in ((0, 0.5), (1, 0.7)):
        run = fake_run(tmp_path, f"s{seed}", "eto", seed, 0.0, 0.0)
        splits = {"test_seen": {"reward": reward, "success": 0.0, "n": 40}}
        (run / "stages" / "eval-2" / "manifest.json").write_text(
            json.dumps({"outputs": {"kind": "eval", "iteration": 2, "splits": splits}})
        )
        runs.append(run)
    tables = compare(runs)
    assert tables["episodes"]["eto"]["shop test_seen"] == 80
    md = to_markdown(tables)
    # Two seeds of 40 episodes: mean 60.0, std of (50, 70) = 14.1.
    assert "| eto | 60.0 ± 14.1 (n=80) |" in md
    assert "| eto | shop test_seen | 0.0 ± 0.0 | - | 60.0 ± 14.1 (n=80) |" in md


def test_paths_that_are_not_runs_are_skipped_with_a_note(tmp_path):
    run = fake_run(tmp_path, "eto", "eto", 0, 0.5, 0.3)
    (tmp_path / "compare.md").write_text("tables")
    (tmp_path / "report").mkdir()
    tables = compare(sorted(tmp_path.iterdir()))
    assert tables["runs"] == [str(run)]
    assert len(tables["skipped"]) == 2
    assert any("compare.md" in note and "not a run directory" in note for note in tables["skipped"])
    with pytest.raises(FileNotFoundError, match="no coevo run directory among"):
        compare([tmp_path / "compare.md", tmp_path / "report"])


def test_compare_command_checks_the_metric_and_names_the_skipped(tmp_path):
    from typer.testing import CliRunner

    from coevo.cli import app

    run = fake_run(tmp_path, "eto", "eto", 0, 0.5, 0.3)
    (tmp_path / "compare.md").write_text("tables")
    runner = CliRunner()
    result = runner.invoke(app, ["compare", str(run), "--metric", "accuracy"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: --metric must be one of reward, success, not 'accuracy'."
    )
    help_text = runner.invoke(app, ["compare", "--help"]).output
    assert "reward" in help_text and "success" in help_text
    result = runner.invoke(app, ["compare", str(run), str(tmp_path / "compare.md")])
    assert result.exit_code == 0, result.output
    assert "| eto | 50.0 | 30.0 | 40.0 |" in result.stdout
    assert "not a run directory" in result.stderr


def test_outcomes_per_iteration_once_an_agent_explored_again(tmp_path):
    first = {"success": 0.5, "hard_negative": 0.25, "failure": 0.25}
    run = fake_run(tmp_path, "a", "failure_agent", 0, 0.5, 0.3, first)
    md = to_markdown(compare([run]))
    assert "| failure_agent / target | 50.0 | 25.0 | 25.0 |" in md
    assert "per iteration (% of rollouts" not in md  # one exploration: nothing to break down
    later = {"success": 0.25, "hard_negative": 0.5, "failure": 0.25}
    stage = run / "stages" / "explore-2"
    stage.mkdir()
    outputs = {"kind": "explore", "iteration": 2, "outcomes": {"target": later}}
    (stage / "manifest.json").write_text(json.dumps({"outputs": outputs}))
    md = to_markdown(compare([run]))
    assert "| failure_agent / target | 37.5 | 37.5 | 25.0 |" in md  # over both explorations
    assert "| failure_agent / target | 1 | 50.0 | 25.0 | 25.0 |" in md
    assert "| failure_agent / target | 2 | 25.0 | 50.0 | 25.0 |" in md


def test_runs_not_evaluated_yet_say_so_instead_of_an_empty_table(tmp_path):
    run = tmp_path / "sft-s0"
    (run / "stages" / "experts").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "sft", "seed": 0}))
    md = to_markdown(compare([run]))
    assert "No finished evaluation yet: sft." in md and "| method |" not in md


def test_every_run_of_a_method_keeps_its_agent_data_rounds(monkeypatch):
    """Runs of one method on two envs and seeds: the rounds table lists both (it once kept the
    last run's rounds only, so one env's rows replaced another's)."""
    import coevo.analysis.compare as module
    from coevo.analysis.runs import RunSummary
    from coevo.run.records import EvolveRecord

    runs = [
        RunSummary("a", "agent_data_random", "sql", 0, rounds=[EvolveRecord(1, verified=51)]),
        RunSummary("b", "agent_data_random", "bfcl", 0, rounds=[EvolveRecord(1, verified=8)]),
        RunSummary("c", "agent_data_guided", "shop", 3, rounds=[EvolveRecord(1, verified=1)]),
        RunSummary("d", "grpo", "sql", 0),
    ]
    monkeypatch.setattr(module, "read_runs", lambda dirs: (runs, []))
    rounds = compare(["a", "b", "c", "d"], baseline=None)["rounds"]
    got = {m: [(r["env"], r["seed"], r["verified"]) for r in rs] for m, rs in rounds.items()}
    assert got == {
        "agent_data_random": [("sql", 0, 51), ("bfcl", 0, 8)],
        "agent_data_guided": [("shop", 3, 1)],
    }
