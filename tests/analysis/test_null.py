from __future__ import annotations

import json
import statistics

import pytest
import yaml

from coevo.analysis.null import null_cells, null_markdown
from coevo.analysis.runs import read_run


def archived_run(root, method, seed, rewards, env="shop", name=None, explorations=(), iteration=1):
    """An archive (`coevo.analysis.archive`) of a run whose final eval, at `iteration`, gave
    task `t<i>` of each split the reward `rewards[split][i]`; `explorations`: (iteration,
    agent, hard-negative share, episodes) of its exploration stages."""
    run = root / env / f"{name or method}-s{seed}"
    (run / "stages").mkdir(parents=True)
    config = {"method": method, "name": name, "seed": seed, "env": {"name": env}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))

    def stage(stage_name, outputs):
        (run / "stages" / stage_name).mkdir()
        (run / "stages" / stage_name / "manifest.json").write_text(json.dumps({"outputs": outputs}))

    splits = {s: {"reward": statistics.fmean(r), "success": 0.0} for s, r in rewards.items()}
    stage(f"eval-{iteration}", {"kind": "eval", "iteration": iteration, "splits": splits})
    for i, agent, share, episodes in explorations:
        shares = {"success": 0.0, "hard_negative": share, "failure": 1 - share}
        stage(
            f"explore-{i}-{agent}",
            {"kind": "explore", "iteration": i, "episodes": episodes, "outcomes": {agent: shares}},
        )
    per_task = {
        f"eval-{iteration}-{split}": {f"{env}/{split}/t{i}": [r] for i, r in enumerate(values)}
        for split, values in rewards.items()
    }
    (run / "eval_rewards.json").write_text(json.dumps(per_task))
    return read_run(run)


def three_sft_seeds(tmp_path):
    return [
        archived_run(tmp_path, "sft", seed, {"test_seen": rewards}, iteration=0)
        for seed, rewards in (
            (1, [1, 0, 0.5, 0]),
            (2, [1, 1, 0.5, 0]),
            (3, [0, 1, 1, 1]),
        )
    ]


def test_every_pair_of_seeds_is_tested_as_a_contrast(tmp_path):
    runs = three_sft_seeds(tmp_path)
    runs.append(archived_run(tmp_path, "eto", 1, {"test_seen": [1, 1, 1, 1]}))  # not the null's
    table = null_cells(runs)
    pairs = table["pairs"]["shop test_seen"]
    assert list(pairs) == ["s2 - s1", "s3 - s1", "s3 - s2"]
    # s2 - s1 = [0, 1, 0, 0]: one task up, its sign flip as extreme: p = 1.
    first = pairs["s2 - s1"]
    assert (first["mean"], first["up"], first["down"], first["same"], first["p"]) == (
        0.25,
        1,
        0,
        3,
        1.0,
    )
    # s3 - s1 = [-1, 1, 0.5, 1], sum 1.5. A pattern's sum is 3.5 - 2F (F: the magnitudes it
    # makes negative): |sum| >= 1.5 when F <= 1 ({}, {0.5} or one of the three 1s: 5 patterns)
    # or F >= 2.5 (their complements: 5). p = 10/16.
    second = pairs["s3 - s1"]
    assert (second["mean"], second["up"], second["down"], second["p"]) == (0.375, 3, 1, 0.625)
    assert second["seed_low"] is None and second["verdict"] == "not shown"
    # s3 - s2 = [-1, 0, 0.5, 1], sum 0.5: every pattern's |2.5 - 2F| >= 0.5, p = 1.
    assert pairs["s3 - s2"]["p"] == 1.0


def test_the_spread_and_the_floor(tmp_path):
    spread = null_cells(three_sft_seeds(tmp_path))["spread"]["shop test_seen"]
    # Seed means 0.375, 0.625, 0.75: mean 0.58333, sd sqrt(0.072917 / 2) = 0.190941.
    assert spread["seeds"] == {1: 0.375, 2: 0.625, 3: 0.75}
    assert spread["mean"] == pytest.approx(0.583333, abs=1e-6)
    assert spread["sd"] == pytest.approx(0.190941, abs=1e-6)
    assert spread["tasks"] == 4
    # The largest null difference: s3 - s1, 0.375. Per-task spread: squares about each pair's
    # mean 0.75 + 2.6875 + 2.1875 = 5.625 over 3 x 3 df: sqrt(0.625) = 0.790569.
    assert spread["floor"] == 0.375
    assert spread["task_sd"] == pytest.approx(0.790569, abs=1e-6)


def test_null_markdown(tmp_path):
    md = null_markdown(null_cells(three_sft_seeds(tmp_path)))
    row = "| shop test_seen | s2 - s1 | +25.0 | 1 / 0 / 3 | 1.000 | none (1 seed) | not shown |"
    assert row in md
    assert "| shop test_seen | s1 37.5, s2 62.5, s3 75.0 | 58.3 ± 19.1 | 79.1 | 37.5 |" in md


def test_one_seed_gives_no_null_pair(tmp_path):
    runs = [archived_run(tmp_path, "sft", 1, {"test_seen": [1, 0]}, iteration=0)]
    table = null_cells(runs)
    assert table["pairs"]["shop test_seen"] == {}
    assert table["spread"]["shop test_seen"]["sd"] is None
    assert table["spread"]["shop test_seen"]["floor"] is None
    assert null_markdown(table) == ""
