from __future__ import annotations

import pytest
import torch

from coevo.analysis.compare import compare, to_markdown
from coevo.analysis.paired import bootstrap, paired
from coevo.analysis.runs import read_run
from coevo.store import Store
from coevo.trajectory import Task, Trajectory, Turn
from tests.analysis.test_compare import fake_run


def store_eval(run, stage, rewards):
    """Store one greedy episode per task `t<i>` of the test_seen split with `rewards[i]`."""
    episodes = [
        Trajectory(
            Task(f"shop/test_seen/t{i}", "shop", "test_seen", "Buy it."),
            "target",
            (Turn("user", "Buy it."), Turn("assistant", "Action: click[x]")),
            reward,
            True,
            False,
            1,
        )
        for i, reward in enumerate(rewards)
        if reward is not None
    ]
    with Store(run) as store:
        store.add_trajectories(episodes, stage=stage)


def test_differences_are_paired_by_task_and_averaged_over_seeds(tmp_path):
    runs = []
    for seed, base, ours in (
        (0, [0, 0, 1, 1, 0.5], [1, 0, 1, 1, None]),  # t4: only the baseline played it
        (1, [0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0]),
    ):
        sft = fake_run(tmp_path, f"sft-s{seed}", "sft", seed, 0.5, 0.5)
        eto = fake_run(tmp_path, f"eto-s{seed}", "eto", seed, 0.5, 0.5)
        store_eval(sft, "eval-2-test_seen", base)
        store_eval(eto, "eval-2-test_seen", ours)
        runs += [sft, eto]
    table = paired([read_run(r) for r in runs])
    d = table["rows"]["eto"]["shop test_seen"]
    # Seed 0: (1 + 0 + 0 + 0) / 4 over its 4 paired tasks; seed 1: 1 / 6. Mean of the two,
    # not the pooled 2 / 10.
    assert d["mean"] == pytest.approx((0.25 + 1 / 6) / 2)
    assert d["seeds"] == 2 and d["tasks"] == 10
    assert d["low"] <= d["mean"] <= d["high"]
    assert d["low"] >= 0  # no task went the other way
    # test_unseen's eval stored nothing: left out with a note naming the run.
    assert "shop test_unseen" not in table["columns"]
    assert any("eto-s0 test_unseen" in note for note in table["notes"])
    md = to_markdown(compare(runs))
    assert "| eto | +20.8 [" in md and "### Reward minus sft's" in md


def test_a_method_without_its_seeds_baseline_is_left_out(tmp_path):
    sft = fake_run(tmp_path, "sft-s0", "sft", 0, 0.5, 0.5)
    eto = fake_run(tmp_path, "eto-s1", "eto", 1, 0.5, 0.5)
    store_eval(sft, "eval-2-test_seen", [0, 1])
    store_eval(eto, "eval-2-test_seen", [1, 1])
    assert paired([read_run(sft), read_run(eto)])["rows"] == {}
    assert compare([sft, eto], baseline=None)["paired"] is None


def test_the_bootstrap_interval_is_the_mean_s_sampling_spread():
    # 400 tasks, half +1, half 0: mean 0.5, standard error 0.025, so about [0.45, 0.55].
    d = bootstrap([torch.tensor([1.0, 0.0] * 200, dtype=torch.float64)], resamples=4000)
    assert d.mean == 0.5
    assert 0.44 < d.low < 0.46 and 0.54 < d.high < 0.56
    same = bootstrap([torch.ones(30, dtype=torch.float64), torch.zeros(10, dtype=torch.float64)])
    assert (same.mean, same.low, same.high) == (0.5, 0.5, 0.5)


def test_compare_command_pairs_with_the_baseline_it_is_given(tmp_path):
    from typer.testing import CliRunner

    from coevo.cli import app

    sft = fake_run(tmp_path, "sft-s0", "sft", 0, 0.5, 0.5)
    eto = fake_run(tmp_path, "eto-s0", "eto", 0, 0.5, 0.5)
    store_eval(sft, "eval-2-test_seen", [0, 0])
    store_eval(eto, "eval-2-test_seen", [1, 0])
    runner = CliRunner()
    shown = runner.invoke(app, ["compare", str(sft), str(eto)])
    assert shown.exit_code == 0, shown.output
    assert "| eto | +50.0 [+0.0, +100.0], 1 |" in shown.stdout
    plain = runner.invoke(app, ["compare", str(sft), str(eto), "--baseline", ""])
    assert plain.exit_code == 0 and "minus" not in plain.stdout
