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
    d = table["rows"]["eto - sft"]["shop test_seen"]
    # Seed 0: (1 + 0 + 0 + 0) / 4 over its 4 paired tasks; seed 1: 1 / 6. Mean of the two,
    # not the pooled 2 / 10.
    assert d["mean"] == pytest.approx((0.25 + 1 / 6) / 2)
    assert d["seeds"] == 2 and d["tasks"] == 10
    assert d["low"] <= d["mean"] <= d["high"]
    assert d["low"] >= 0  # no task went the other way
    # Over the 10 (seed, task) pairs: t0 of seed 0 and t3 of seed 1 up, none down. The two
    # equal non-zero differences give 4 sign patterns, 2 as extreme: p = 0.5. Two seeds: no
    # seed-level interval.
    assert (d["up"], d["down"], d["same"]) == (2, 0, 8)
    assert (d["p"], d["exact"]) == (0.5, True)
    assert d["seed_low"] is None and d["verdict"] == "not shown"
    # test_unseen's eval stored nothing: left out with a note naming the run.
    assert "shop test_unseen" not in table["columns"]
    assert any("eto-s0 test_unseen" in note for note in table["notes"])
    md = to_markdown(compare(runs))
    assert "| eto - sft | shop test_seen | +20.8 | 2 / 0 / 8 | 0.500 | none (2 seeds) |" in md
    assert "### Reward: each method minus sft's" in md and "sign-flip permutation" in md
    # Seed by seed: seed 0's mean over its 4 paired tasks, seed 1's over its 6, each with the
    # one task that went up.
    assert "| eto - sft | shop test_seen | +25.0 (1 / 0) | +16.7 (1 / 0) |" in md
    assert "| eto | shop test_seen | 50.0 | 50.0 |" in md  # the manifests' final scores


def test_three_seeds_with_direct_contrasts(tmp_path):
    # Five tasks per seed. SFT 0 everywhere; ETO +0.5 on t0 of every seed; failure-agent up on
    # 4, 3 and 5 tasks of seeds 0, 1, 2.
    ours = {0: [1, 1, 1, 1, 0], 1: [1, 1, 1, 0, 0], 2: [1, 1, 1, 1, 1]}
    runs = []
    for seed in range(3):
        for method, rewards in (
            ("sft", [0] * 5),
            ("eto", [0.5, 0, 0, 0, 0]),
            ("failure_agent", ours[seed]),
        ):
            run = fake_run(tmp_path, f"{method}-s{seed}", method, seed, 0.5, 0.5)
            store_eval(run, "eval-2-test_seen", rewards)
            runs.append(run)
    rows = paired([read_run(r) for r in runs])["rows"]
    assert list(rows) == ["eto - sft", "failure_agent - sft", "failure_agent - eto"]
    # ETO: 3 tasks up by 0.5, none down: p = 2/8. Its seeds agree exactly (each +0.1, a
    # zero-width interval above 0), yet three tasks are too few to call it a gain.
    eto = rows["eto - sft"]["shop test_seen"]
    assert (eto["up"], eto["down"], eto["same"], eto["p"]) == (3, 0, 12, 0.25)
    assert eto["seed_low"] == pytest.approx(0.1) and eto["verdict"] == "not shown"
    # Failure-agent minus SFT: 12 up, none down, p = 2 / 2^12. Seed means 0.8, 0.6, 1.0:
    # mean 0.8, sd 0.2, t interval 0.8 +- 4.3027 * 0.2 / sqrt(3) = [0.3032, 1.2968]. A gain.
    fa = rows["failure_agent - sft"]["shop test_seen"]
    assert (fa["up"], fa["down"], fa["same"], fa["p"]) == (12, 0, 3, 2 / 4096)
    assert (fa["seed_low"], fa["seed_high"]) == pytest.approx((0.30317, 1.29683), abs=1e-5)
    assert fa["verdict"] == "gain"
    # Failure-agent minus ETO on the same tasks: seed 0 [+0.5, 1, 1, 1, 0], seed 1
    # [+0.5, 1, 1, 0, 0], seed 2 [+0.5, 1, 1, 1, 1]: 12 up; seed means 0.7, 0.5, 0.9.
    direct = rows["failure_agent - eto"]["shop test_seen"]
    assert (direct["up"], direct["down"], direct["same"]) == (12, 0, 3)
    assert direct["mean"] == pytest.approx(0.7) and direct["verdict"] == "gain"
    # The table's three tests are one family (Holm): 2/4096 x 3 for the two smallest (the
    # second kept at the first's), 0.25 x 1 for ETO's.
    assert [rows[n]["shop test_seen"]["p_holm"] for n in rows] == pytest.approx(
        [0.25, 6 / 4096, 6 / 4096]
    )
    md = to_markdown(compare(runs))
    assert "| eto - sft | shop test_seen | +10.0 |" in md and "| 3 | 0.250 |" in md
    assert "| failure_agent - eto | shop test_seen | +70.0 | 12 / 0 / 3 | < 0.001 |" in md
    assert "| [+30.3, +129.7] | gain |" in md
    # The seed means the interval above was taken over, with the tasks behind each.
    per_seed = paired([read_run(r) for r in runs])["per_seed"]["failure_agent - sft"]
    assert per_seed["shop test_seen"][1] == {"mean": pytest.approx(0.6), "up": 3, "down": 0}
    assert (
        "| failure_agent - sft | shop test_seen | +80.0 (4 / 0) | +60.0 (3 / 0) | +100.0 (5 / 0) |"
        in md
    )


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
    row = "| eto - sft | shop test_seen | +50.0 | 1 / 0 / 1 | 1.000 | none (1 seed) | not shown "
    assert row + "| [+0.0, +100.0] | 1 |" in shown.stdout
    assert "per seed" not in shown.stdout  # one seed: the averages table says it all
    plain = runner.invoke(app, ["compare", str(sft), str(eto), "--baseline", ""])
    assert plain.exit_code == 0 and "minus" not in plain.stdout


def test_matched_eto_is_compared_with_failure_agent_and_eto(tmp_path):
    from tests.analysis.test_null import archived_run

    runs = [
        archived_run(tmp_path, "sft", 1, {"test_seen": [0, 0]}, iteration=0),
        archived_run(tmp_path, "eto", 1, {"test_seen": [1, 0]}),
        archived_run(tmp_path, "failure_agent", 1, {"test_seen": [1, 1]}),
        # An ETO run given failure-agent's DPO steps: the method is eto, its name tells it apart.
        archived_run(tmp_path, "eto", 1, {"test_seen": [0, 1]}, name="eto_matched"),
    ]
    rows = paired(runs)["rows"]
    assert list(rows) == [
        "eto - sft",
        "failure_agent - sft",
        "eto_matched - sft",
        "failure_agent - eto",
        "eto_matched - failure_agent",
        "eto_matched - eto",
    ]
    assert rows["eto_matched - failure_agent"]["shop test_seen"]["mean"] == -0.5
    assert rows["eto_matched - eto"]["shop test_seen"]["mean"] == 0.0  # t0 down, t1 up


def test_a_cells_resampled_figures_do_not_move_when_another_env_joins(tmp_path):
    from tests.analysis.test_null import archived_run

    # 30 tasks, half of them changed both ways: the bootstrap interval and the sign-flip p
    # (Monte Carlo above its exact size) depend on the resampling seed.
    gains = {"test_seen": [1, 0] * 15, "test_unseen": [1, 1, 0] * 10}
    flat = {"test_seen": [0, 1] * 15, "test_unseen": [0, 1, 1] * 10}
    sql = [
        archived_run(tmp_path / "a", "grpo", 0, gains, env="sql"),
        archived_run(tmp_path / "a", "sft", 0, flat, env="sql"),
    ]
    shop = [
        archived_run(tmp_path / "b", "grpo", 0, flat, env="shop"),
        archived_run(tmp_path / "b", "sft", 0, gains, env="shop"),
    ]
    alone = paired(sql, resamples=500)["rows"]["grpo - sft"]
    joined = paired(shop + sql, resamples=500)["rows"]["grpo - sft"]
    for column, cell in alone.items():
        assert joined[column] == cell


def test_failure_agent_is_compared_with_rft_directly(tmp_path):
    from tests.analysis.test_null import archived_run

    runs = [
        archived_run(tmp_path, "sft", 1, {"test_unseen": [0, 0, 1]}, iteration=0),
        archived_run(tmp_path, "rft", 1, {"test_unseen": [1, 1, 1]}),
        archived_run(tmp_path, "failure_agent", 1, {"test_unseen": [1, 0, 0]}),
    ]
    rows = paired(runs)["rows"]
    assert list(rows) == ["rft - sft", "failure_agent - sft", "failure_agent - rft"]
    cell = rows["failure_agent - rft"]["shop test_unseen"]
    assert cell["mean"] == pytest.approx(-2 / 3)  # t1 and t2 down, t0 level
    assert (cell["up"], cell["down"], cell["same"]) == (0, 2, 1)
