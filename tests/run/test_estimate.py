"""The time a run has left: its finished stages' rates times the planned work, by hand."""

from __future__ import annotations

import json

from coevo.run.estimate import DPO, EPISODE, SFT, Planned, rates, time_left


def finished(run, stage: str, seconds: float, outputs: dict) -> None:
    (run / "stages" / stage).mkdir(parents=True)
    record = {"outputs": outputs, "seconds": seconds}
    (run / "stages" / stage / "manifest.json").write_text(json.dumps(record))


def test_the_time_left_is_the_rates_so_far_times_the_work_planned(tmp_path):
    finished(tmp_path, "sft-target", 40.0, {"kind": "sft", "steps": 16})
    splits = {"test_seen": {"reward": 0.5, "success": 0.0, "n": 8}, "test_unseen": {"n": 12}}
    finished(tmp_path, "eval-0", 10.0, {"kind": "eval", "iteration": 0, "splits": splits})
    finished(tmp_path, "explore-1-target", 6.0, {"kind": "explore", "episodes": 4})
    finished(tmp_path, "dpo-1-target", 3.0, {"kind": "dpo", "pairs": 0, "skipped": True})
    # 16 s over 24 episodes; 40 s over 16 SFT steps; a skipped DPO stage times nothing.
    assert rates(tmp_path) == {EPISODE: 16.0 / 24, SFT: 2.5}
    todo = [
        Planned("sft-failure", "SFT", SFT, 8),
        Planned("dpo-1-failure", "DPO", DPO, 4, exact=False),
        Planned("eval-1", "episodes", EPISODE, 30),
        Planned("evolve-1", "a round"),  # no work counted: neither timed nor named
    ]
    # 8 x 2.5 + 30 x 2/3 = 40 s.
    assert time_left("runs/x", tmp_path, todo) == (
        "runs/x: about 40 s left in 4 stages (at this run's 0.67 s an episode, 2.5 s an SFT "
        "step); not counted: dpo-1-failure (size or rate not known yet)"
    )
    assert time_left("runs/x", tmp_path, todo[1:2]) is None  # nothing countable yet
