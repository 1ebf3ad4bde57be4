"""Pair construction worked out by hand on small reward tables."""

from __future__ import annotations

import pytest

from coevo.pairs import eto_pairs, failure_pairs, target_pairs
from coevo.trajectory import Task, Trajectory, Turn


def traj(task: str, agent: str, reward: float, tag: str = "") -> Trajectory:
    t = Task(task, "toy", "train", f"do {task}")
    turns = (Turn("user", "go"), Turn("assistant", f"{agent}{tag}"))
    return Trajectory(t, agent, turns, reward, True, False, 1)


EXPERTS = {k: traj(k, "expert", 1.0) for k in ("a", "b", "c")}


def test_eto_pairs_direction_and_ties():
    preds = [traj("a", "target", 0.3), traj("b", "target", 1.0), traj("c", "target", 0.0)]
    pairs = eto_pairs(EXPERTS, preds)
    # b ties with the expert (1.0 = 1.0): dropped. a and c: expert chosen.
    assert [(p.task.id, p.chosen.agent, p.rejected.reward) for p in pairs] == [
        ("a", "expert", 0.3),
        ("c", "expert", 0.0),
    ]
    assert all(p.kind == "expert_vs_prediction" and p.weight == 1.0 for p in pairs)


def test_eto_reverses_when_prediction_beats_expert():
    weak_expert = {"a": traj("a", "expert", 0.5)}
    (pair,) = eto_pairs(weak_expert, [traj("a", "target", 0.75)])
    assert pair.chosen.agent == "target" and pair.kind == "expert_vs_prediction_reversed"


def test_failure_pairs_cross_agent_by_hand():
    # Task a: target failures {0.2, 0.5}, failure-agent failures {0.5, 0.8} and a success (1.0,
    # not a failure). Cross pairs: (0.2,0.5) (0.2,0.8) (0.5,0.5)=tie (0.5,0.8) -> 3 pairs.
    target = [traj("a", "target", 0.2), traj("a", "target", 0.5)]
    failure = [traj("a", "failure", 0.5), traj("a", "failure", 0.8), traj("a", "failure", 1.0)]
    pairs = failure_pairs(target, failure)
    got = sorted((p.chosen.reward, p.rejected.reward) for p in pairs)
    assert got == [(0.5, 0.2), (0.8, 0.2), (0.8, 0.5)]
    assert all(p.kind == "failure_vs_failure" and p.sft_weight == 0.0 for p in pairs)
    assert all(p.chosen.reward > p.rejected.reward for p in pairs)


def test_failure_pairs_within_agent_adds_own_pairs():
    # Within target: (0.2, 0.5) -> +1; within failure: (0.5, 0.8) -> +1. 3 cross + 2 = 5.
    target = [traj("a", "target", 0.2), traj("a", "target", 0.5)]
    failure = [traj("a", "failure", 0.5), traj("a", "failure", 0.8)]
    assert len(failure_pairs(target, failure, within_agent=True)) == 5


def test_failure_pairs_need_the_same_task():
    assert failure_pairs([traj("a", "target", 0.2)], [traj("b", "failure", 0.6)]) == []


def test_target_pairs_weights_by_hand():
    # Task a: target 0.4, failure agent 0.7 and 1.0 (success).
    #   expert vs target (1.0 > 0.4) and expert vs failure (1.0 > 0.7): 2 pairs, weight 1/2 each;
    #   expert vs the failure agent's success is a tie: dropped.
    #   failure-vs-failure: (0.7 > 0.4): 1 pair, weight 1, sft 0.
    # Task b: target 0.0, failure 0.0, 0.0, 0.3 -> 4 expert pairs of weight 1/4;
    #   cross failures: (0,0) tie, (0,0) tie, (0.3 > 0) -> 1 pair.
    target = [traj("a", "target", 0.4), traj("b", "target", 0.0)]
    failure = [
        traj("a", "failure", 0.7),
        traj("a", "failure", 1.0),
        traj("b", "failure", 0.0, "x"),
        traj("b", "failure", 0.0, "y"),
        traj("b", "failure", 0.3),
    ]
    pairs = target_pairs(EXPERTS, target, failure, lambda_sft=0.1)
    expert_pairs = [p for p in pairs if p.chosen.agent == "expert"]
    ff = [p for p in pairs if p.kind == "failure_vs_failure"]
    for task, n in (("a", 2), ("b", 4)):
        group = [p for p in expert_pairs if p.task.id == task]
        assert len(group) == n
        assert sum(p.weight for p in group) == pytest.approx(1.0)
        assert all(p.sft_weight == 0.1 for p in group)
    assert {p.kind for p in expert_pairs} == {"expert_vs_target", "expert_vs_failure"}
    assert [(p.task.id, p.chosen.reward, p.rejected.reward) for p in ff] == [
        ("a", 0.7, 0.4),
        ("b", 0.3, 0.0),
    ]
    assert all(p.weight == 1.0 and p.sft_weight == 0.0 for p in ff)


def test_target_pairs_without_expert_keep_only_failure_pairs():
    pairs = target_pairs({}, [traj("z", "target", 0.1)], [traj("z", "failure", 0.5)])
    assert [(p.kind, p.chosen.reward) for p in pairs] == [("failure_vs_failure", 0.5)]


def test_why_no_pairs_says_what_the_rollouts_lacked():
    from coevo.pairs import why_no_pairs

    won = [traj("a", "target", 1.0), traj("b", "target", 1.0)]
    assert why_no_pairs(won, against_expert=True) == (
        "all 2 rollouts succeeded, so none is worse than another"
    )
    tied = [traj("a", "target", 0.0), traj("a", "failure", 0.0)]
    assert failure_pairs(tied[:1], tied[1:]) == []
    assert why_no_pairs(tied, against_expert=False) == (
        "every one of the 2 failures scored 0, and a failure-vs-failure pair needs two "
        "different rewards"
    )
    apart = [traj("a", "target", 0.2), traj("b", "failure", 0.5)]
    assert failure_pairs(apart[:1], apart[1:]) == []
    assert "no two failures of one task" in why_no_pairs(apart, against_expert=False)
    assert why_no_pairs([], against_expert=True) == "there were no rollouts"


def test_a_preference_stage_without_pairs_says_why(tmp_path, capsys):
    from coevo.config import build
    from coevo.run.context import Run, StageModel
    from coevo.run.pipeline import Pipeline
    from coevo.run.recipe import RunConfig
    from coevo.stages import training

    config = build(RunConfig, {})
    run = Run(config, Pipeline(tmp_path, {}, name="runs/x"), store=None, pool=None)
    start = StageModel(tmp_path / "model")
    why = "every one of the 4 failures scored 0, and ..."
    handed = training.dpo(run, "failure", start, [], 1, config.dpo, 0, why_none=why)
    assert handed is start  # the model carries over untrained
    assert capsys.readouterr().err.splitlines() == [
        "runs/x: stage dpo-1-failure",
        f"runs/x: stage dpo-1-failure: no pairs ({why}): nothing to learn from, so the stage is "
        "skipped and the model carries over untrained",
    ]
