from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevo.analysis.archive import rewards_file
from coevo.analysis.claims import NOT_SHOWN, SHOWN, UNTESTABLE, claims, claims_markdown
from coevo.analysis.null import null_cells
from tests.analysis.test_null import archived_run

# Eight tasks per split and seed. SFT scores 0 everywhere; ETO 0.5 on t0-t2; failure-agent 1 on
# t0-t2 and on 1, 0 and 2 more tasks of seeds 1, 2, 3 on test_seen, as ETO on test_unseen.
ETO = [0.5] * 3 + [0] * 5
FAILURE_SEEN = {1: [1] * 4 + [0] * 4, 2: [1] * 3 + [0] * 5, 3: [1] * 5 + [0] * 3}


def grid(tmp_path, seeds=(1, 2, 3), table2=True):
    runs = []
    for seed in seeds:
        runs.append(
            archived_run(
                tmp_path, "sft", seed, {"test_seen": [0] * 8, "test_unseen": [0] * 8}, iteration=0
            )
        )
        # Table 2: both agents 25% hard negatives in the first exploration; after a DPO the
        # failure agent 40, 50, 45% and ETO's 20, 25, 20%.
        after = {1: (0.4, 0.2), 2: (0.5, 0.25), 3: (0.45, 0.2)}[seed]
        runs.append(
            archived_run(
                tmp_path,
                "eto",
                seed,
                {"test_seen": ETO, "test_unseen": ETO},
                explorations=[(1, "target", 0.25, 64)] + [(2, "target", after[1], 64)] * table2,
            )
        )
        runs.append(
            archived_run(
                tmp_path,
                "failure_agent",
                seed,
                {"test_seen": FAILURE_SEEN[seed], "test_unseen": ETO},
                explorations=[(1, "failure", 0.25, 64)] + [(2, "failure", after[0], 64)] * table2,
            )
        )
    return runs


def by_claim(rows, claim, where):
    return next(r for r in rows if r["claim"].startswith(claim) and r["where"] == where)


def test_the_order_is_shown_where_both_contrasts_are_gains(tmp_path):
    runs = grid(tmp_path)
    rows = claims(runs, null_cells(runs))
    seen = by_claim(rows, "failure-agent > ETO > SFT", "shop test_seen")
    # ETO - SFT: 9 tasks up, none down (p 2/512), every seed +0.1875: a gain. Failure-agent -
    # ETO: 12 up (p 2/4096), seed means 0.3125, 0.1875, 0.3125: t interval [0.09, 0.45].
    assert seen["verdict"] == SHOWN
    # Detectable, the larger of the two contrasts' (SFT seeds all equal: no seed spread).
    # failure_agent - eto: squares about the seed means 0.96875 + 0.46875 + 1.21875 over
    # 3 x 7 df, sd 0.355651; 2.8016 * 0.355651 / sqrt(8 * 3) = 0.203387; with t at df 2,
    # 5.3634 * 0.072597 = 0.389364. (ETO - SFT: sd 0.258775, 0.147986.)
    assert seen["detectable"] == pytest.approx(0.203387, abs=1e-5)
    assert seen["detectable_t"] == pytest.approx(0.389364, abs=1e-5)
    assert not seen["lower_bound"]
    unseen = by_claim(rows, "failure-agent > ETO > SFT", "shop test_unseen")
    assert unseen["verdict"] == NOT_SHOWN
    assert unseen["why"] == "failure_agent - eto: task level p 1.000"


def test_the_unseen_gain_is_tested_across_the_two_task_sets(tmp_path):
    runs = grid(tmp_path)
    row = by_claim(claims(runs, null_cells(runs)), "larger gain on unseen", "shop")
    # Gains: unseen 0.1875 at every seed; seen 0.5, 0.375, 0.625 (mean 0.5). The gap is the
    # other way.
    assert row["evidence"].startswith("unseen gain +18.8 minus seen gain +50.0 = -31.2")
    assert row["verdict"] == NOT_SHOWN


def test_two_seeds_cannot_show_a_claim(tmp_path):
    runs = grid(tmp_path, seeds=(1, 2))
    rows = claims(runs, null_cells(runs))
    seen = by_claim(rows, "failure-agent > ETO > SFT", "shop test_seen")
    # Both contrasts pass at task level (ETO: 6 up, p 2/64; failure-agent - ETO: 7 up).
    assert seen["verdict"] == UNTESTABLE
    assert "2 seeds, no seed-level test (3 needed)" in seen["why"]
    assert seen["detectable_t"] is None
    table2 = by_claim(rows, "Table 2", "shop")
    assert table2["verdict"] == UNTESTABLE


def test_table_2_after_a_dpo(tmp_path):
    runs = grid(tmp_path)
    row = by_claim(claims(runs, null_cells(runs)), "Table 2", "shop")
    # Gaps 0.2, 0.25, 0.25: mean 0.23333, sd 0.028868, t interval [0.1616, 0.3050].
    assert row["verdict"] == SHOWN
    assert row["evidence"].endswith("; seeds [+16.2, +30.5]")
    assert row["evidence"].startswith("s1 iteration 1 (before any DPO): failure agent 25.0%")
    evidence = row["evidence"]
    assert "s1 iteration 2 (after DPO): failure agent 40.0%, ETO's agent 20.0% (+20.0)" in evidence
    # Episode level: 26 + 32 + 29 of 192 hard negatives against 13 + 16 + 13.
    assert "; pooled 87 / 192 against 42 / 192 episodes, Fisher p < 0.001; " in evidence
    assert row["why"] == "a gain at both levels"
    # First explorations: p = 0.25, 64 episodes per agent, no spread over seeds: sd of a
    # difference of two indicators sqrt(2 * 0.25 * 0.75) = 0.612372, over sqrt(64 * 3):
    # 0.044194; times 2.8016 = 0.123814, times 5.3634 (t, df 2) = 0.237029.
    assert row["detectable"] == pytest.approx(0.123814, abs=1e-5)
    assert row["detectable_t"] == pytest.approx(0.237029, abs=1e-5)
    before = by_claim(claims(grid(tmp_path / "b", table2=False), {"spread": {}}), "Table 2", "shop")
    assert before["verdict"] == UNTESTABLE and "iteration 2 on" in before["why"]


def test_table_2_reads_the_explorations_of_branches_and_nothing_else_of_them(tmp_path):
    """The grid's runs have one iteration; Table 2's branches (`benchmarks/learning.py
    --table2`) went on from them to explore once more: the verdict is the one their second
    explorations give, and their scores (their sources') change no other claim."""
    runs = grid(tmp_path / "runs", table2=False)
    branches = [run for run in grid(tmp_path / "table2", table2=True) if run.method != "sft"]
    null = null_cells(runs)
    row = by_claim(claims(runs, null, branches), "Table 2", "shop")
    assert row["verdict"] == SHOWN and row["evidence"].endswith("; seeds [+16.2, +30.5]")
    alone = claims(runs, null)
    assert by_claim(alone, "Table 2", "shop")["verdict"] == UNTESTABLE
    others = [r for r in claims(runs, null, branches) if not r["claim"].startswith("Table 2")]
    assert others == [r for r in alone if not r["claim"].startswith("Table 2")]


def explored(tmp_path, seeds, paired):
    """Table 2's runs at `seeds`, 8 train tasks explored once by each agent after a DPO: the
    failure agent finds a hard negative (reward 0.7) on t0-t2, ETO's agent on t0-t1 (shares
    37.5% and 25.0%). Only the seeds in `paired` keep their rewards per task."""
    runs = []
    for seed in seeds:
        for method, agent, hard in (("failure_agent", "failure", 3), ("eto", "target", 2)):
            run = archived_run(
                tmp_path,
                method,
                seed,
                {"test_seen": [0] * 8},
                explorations=[(2, agent, hard / 8, 8)],
            )
            if seed in paired:
                rewards = {f"shop/train/t{i}": [0.7 if i < hard else 0.0] for i in range(8)}
                path = Path(run.path) / rewards_file("explore")
                path.write_text(json.dumps({f"explore-2-{agent}": rewards}))
            runs.append(run)
    return runs


def test_table_2_pairs_the_agents_task_by_task_where_the_archives_kept_the_tasks(tmp_path):
    rows = claims(explored(tmp_path / "all", (1, 2, 3), (1, 2, 3)), {"spread": {}})
    row = by_claim(rows, "Table 2", "shop")
    # Every seed: t2 up, nothing down; 3 tasks up over the seeds: sign-flip p 2 / 8 = 0.25,
    # which decides (Fisher's 9 / 24 against 6 / 24 would give 0.534).
    assert "pooled 9 / 24 against 6 / 24 episodes, Fisher p 0.534; " in row["evidence"]
    assert (
        "; paired by task (s1, s2, s3: 24 tasks), more in the failure agent's on 3, in ETO's "
        "agent's on 0, sign-flip p 0.250; seeds [" in row["evidence"]
    )
    assert (row["verdict"], row["why"]) == (NOT_SHOWN, "task level p 0.250")
    # Seed 3's archives predate the tasks' rewards: the pairs of seeds 1-2 are shown, Fisher
    # decides.
    rows = claims(explored(tmp_path / "some", (1, 2, 3), (1, 2)), {"spread": {}})
    row = by_claim(rows, "Table 2", "shop")
    assert (
        "paired by task (s1, s2: 16 tasks), more in the failure agent's on 2, in ETO's "
        in (row["evidence"])
    )
    assert "agent's on 0, sign-flip p 0.500" in row["evidence"]
    assert row["why"] == "episode level p 0.534"
    # None kept: as before, no paired test.
    rows = claims(explored(tmp_path / "none", (1, 2, 3), ()), {"spread": {}})
    row = by_claim(rows, "Table 2", "shop")
    assert "paired by task" not in row["evidence"] and row["why"] == "episode level p 0.534"


def test_agent_data_must_lead_grpo_by_five_points(tmp_path):
    runs = []
    for seed in (1, 2, 3):
        runs.append(
            archived_run(
                tmp_path, "grpo", seed, {"test_seen": [0] * 8, "test_unseen": [0] * 8}, env="sql"
            )
        )
        runs.append(
            archived_run(
                tmp_path,
                "agent_data",
                seed,
                {"test_seen": [0.05] * 3 + [0] * 5, "test_unseen": ETO},
                env="sql",
            )
        )
    rows = claims(runs, null_cells(runs))
    seen = by_claim(rows, "agent_data >= grpo + 5", "sql test_seen")
    # 9 tasks up by 0.05, every seed +0.01875: a gain, of 1.9 points.
    assert (seen["verdict"], seen["why"]) == (NOT_SHOWN, "a gain, of less than 5 points")
    unseen = by_claim(rows, "agent_data >= grpo + 5", "sql test_unseen")
    assert unseen["verdict"] == SHOWN
    # No SFT run: no seed spread, so the detectable difference is a lower bound.
    assert unseen["lower_bound"]
    md = claims_markdown(rows)
    assert "| agent_data >= grpo + 5 | sql test_unseen |" in md and "| **shown** |" in md
    assert "| >= " in md
    missing = by_claim(rows, "failure-agent > ETO > SFT", "sql test_seen")
    assert missing["verdict"] == UNTESTABLE and missing["detectable"] is None


def test_each_explorer_variant_gets_the_margin_claim_and_guided_meets_random(tmp_path):
    runs = []
    for seed in (1, 2, 3):
        rewards = {"grpo": [0] * 8, "agent_data_random": [0] * 8, "agent_data_guided": [1] * 8}
        for method, got in rewards.items():
            split = {"test_seen": got, "test_unseen": got}
            runs.append(archived_run(tmp_path, method, seed, split, env="sql"))
    rows = claims(runs, null_cells(runs))
    guided = by_claim(rows, "agent_data_guided >= grpo + 5", "sql test_seen")
    assert guided["verdict"] == SHOWN
    random = by_claim(rows, "agent_data_random >= grpo + 5", "sql test_seen")
    assert random["verdict"] == NOT_SHOWN  # no task changed
    feedback = by_claim(rows, "signal feedback > random exploration", "sql test_unseen")
    assert feedback["verdict"] == SHOWN
    assert "agent_data_guided - agent_data_random +100.0" in feedback["evidence"]
    # The method itself keeps its row, saying what is missing.
    plain = by_claim(rows, "agent_data >= grpo + 5", "sql test_seen")
    assert plain["verdict"] == UNTESTABLE and "no archived agent_data" in plain["why"]


def test_verification_is_claimed_once_both_guided_runs_are_archived(tmp_path):
    runs = []
    for seed in (1, 2, 3):
        # Without verification 6 of 8 tasks fail that the guided run solves, in every seed.
        rewards = {"agent_data_guided": [1] * 8, "agent_data_unverified": [1, 1] + [0] * 6}
        for method, got in rewards.items():
            split = {"test_seen": got, "test_unseen": [1] * 8}
            runs.append(archived_run(tmp_path, method, seed, split, env="bfcl"))
    rows = claims(runs, null_cells(runs))
    seen = by_claim(rows, "verification helps", "bfcl test_seen")
    assert seen["verdict"] == SHOWN
    assert "agent_data_guided - agent_data_unverified +75.0" in seen["evidence"]
    assert by_claim(rows, "verification helps", "bfcl test_unseen")["verdict"] == NOT_SHOWN
    # Without the unverified run there is no such row at all.
    guided_only = [r for r in runs if r.method == "agent_data_guided"]
    claimed = {r["claim"] for r in claims(guided_only, null_cells(guided_only))}
    assert "verification helps" not in claimed


def test_rows_with_no_spread_at_all_claim_no_detectable_difference(tmp_path):
    """bfcl's rows: every run scores 0 on every task, one seed, no SFT spread. Nothing
    estimates the noise, so the detectable difference is unknown ("-"), not ">= 0.0"."""
    zeros = {"test_seen": [0] * 8, "test_unseen": [0] * 8}
    runs = [
        archived_run(tmp_path, "grpo", 0, zeros, env="bfcl"),
        archived_run(tmp_path, "agent_data_random", 0, zeros, env="bfcl"),
    ]
    rows = claims(runs, null_cells(runs))
    seen = by_claim(rows, "agent_data_random >= grpo + 5", "bfcl test_seen")
    assert seen["verdict"] == NOT_SHOWN
    assert seen["detectable"] is None and seen["detectable_t"] is None
    md = claims_markdown(rows)
    line = next(x for x in md.splitlines() if x.startswith("| agent_data_random >= grpo + 5 |"))
    assert line.endswith("| - | - |") and ">= 0.0" not in md


def test_failure_agent_against_rft_is_a_claim_where_both_ran(tmp_path):
    runs = grid(tmp_path)
    assert not [r for r in claims(runs, null_cells(runs)) if r["claim"] == "failure-agent > RFT"]
    # RFT 1 on every task a failure-agent run scores 1 on, and on one more of test_unseen.
    runs += [
        archived_run(
            tmp_path,
            "rft",
            seed,
            {"test_seen": FAILURE_SEEN[seed], "test_unseen": [1] * 4 + [0] * 4},
        )
        for seed in (1, 2, 3)
    ]
    rows = claims(runs, null_cells(runs))
    seen = by_claim(rows, "failure-agent > RFT", "shop test_seen")
    assert seen["verdict"] == NOT_SHOWN  # no task changed
    unseen = by_claim(rows, "failure-agent > RFT", "shop test_unseen")
    assert unseen["verdict"] == NOT_SHOWN
    assert unseen["evidence"].startswith("failure_agent - rft -")  # below RFT: not a gain
