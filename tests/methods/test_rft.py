"""RFT and its DART-style sampling: which tasks get more samples, what is kept, the stages."""

from __future__ import annotations

import json
import re

import pytest

from coevo.methods.rft import distinct_successes, extra_samples
from coevo.methods.runner import execute
from coevo.store import Store
from coevo.trajectory import Task, Trajectory, Turn
from tests.methods.test_run import recipe


def attempt(task_id: str, reward: float, reply: str = "Action: look") -> Trajectory:
    task = Task(task_id, "toy", "train", "Type it.", {})
    turns = (Turn("user", "Type it."), Turn("assistant", reply))
    return Trajectory(task, "target", turns, reward, True, False, 1)


def test_dart_spends_the_budget_on_the_tasks_the_probes_found_hard():
    # 5 probes each: a solved 5 times, b 2 times, c never; budget 10 = 5 more at most.
    probes = (
        [attempt("a", 1.0)] * 5
        + [attempt("b", 1.0)] * 2
        + [attempt("b", 0.5)] * 3
        + [attempt("c", 0.0)] * 5
    )
    # ceil((10 - 5) * (1 - rate)): a 0, b ceil(5 * 0.6) = 3, c 5.
    assert extra_samples(probes, probes=5, budget=10) == {"a": 0, "b": 3, "c": 5}


def test_successes_are_kept_once_per_distinct_reply_sequence():
    kept = distinct_successes(
        [
            attempt("a", 1.0, "Action: type[x]"),
            attempt("a", 1.0, "Action: type[x]"),  # the same replies again
            attempt("a", 1.0, "Action: look"),
            attempt("a", 0.5, "Action: type[y]"),  # not a success
            attempt("b", 1.0, "Action: type[x]"),  # same text, another task
        ]
    )
    assert [(t.task.id, t.agent_texts) for t in kept] == [
        ("a", ["Action: type[x]"]),
        ("a", ["Action: look"]),
        ("b", ["Action: type[x]"]),
    ]


@pytest.fixture(scope="module")
def dart_run(tmp_path_factory):
    rft = {"rounds": 1, "dart": True, "dart_probes": 2, "dart_budget": 4}
    return execute(
        recipe(method="rft", rft=rft), tmp_path_factory.mktemp("rft") / "run", quiet=True
    )


def test_rft_with_dart_probes_then_samples_the_hard_tasks_again(dart_run):
    stages = {p.parent.name for p in (dart_run / "stages").glob("*/manifest.json")}
    assert {
        "experts",
        "model",
        "sft-target",
        "eval-0",
        "rft-1-probe",
        "sft-rft-1",
        "eval-1",
    } <= stages
    with Store(dart_run, create=False) as store:
        probes = store.trajectories(stage="rft-1-probe")
        assert sorted((t.task.id, t.sample) for t in probes) == sorted(
            (f"toy/train/{i}", k) for i in range(8) for k in range(2)
        )
        extra = extra_samples(probes, probes=2, budget=4)
        for n in set(extra.values()) - {0}:
            played = store.trajectories(stage=f"rft-1-extra{n}")
            assert sorted({t.task.id for t in played}) == sorted(
                t for t, m in extra.items() if m == n
            )
            assert len(played) == n * sum(1 for m in extra.values() if m == n)
        extras = [
            t
            for n in set(extra.values()) - {0}
            for t in store.trajectories(stage=f"rft-1-extra{n}")
        ]
        assert {s for s in stages if s.startswith("rft-1-extra")} == {
            f"rft-1-extra{n}" for n in set(extra.values()) - {0}
        }
        experts = store.trajectories(stage="experts")
    # The round fine-tunes the base model on the experts and every distinct success.
    sft = json.loads((dart_run / "stages/sft-rft-1/manifest.json").read_text())["inputs"]
    assert sft["trajectories"] == len(experts) + len(distinct_successes(probes + extras))
    assert sft["start"] == str(dart_run / "stages/model/model")


def test_the_plan_names_the_rounds_stages(dart_run, tmp_path):
    from coevo.methods.registry import method
    from tests.methods.test_run import manifest_times, scope_of

    config = recipe(
        method="rft", rft={"rounds": 1, "dart": True, "dart_probes": 2, "dart_budget": 4}
    )
    times = manifest_times(dart_run)
    # DART's extra samples make one stage per sample count, which only the probes decide.
    ran = [re.sub(r"extra\d+$", "extra<n>", name) for name in sorted(times, key=times.get)]
    with scope_of(config, tmp_path / "fresh") as fresh:
        planned = method("rft").plan(fresh)
    assert [p.name for p in planned] == list(dict.fromkeys(ran))
    extra = next(p for p in planned if p.name == "rft-1-extra<n>")
    assert (extra.units, extra.exact) == (16, False)  # 8 tasks x (4 - 2) at most
    with scope_of(config, dart_run) as finished:
        assert all(finished.done(p.name) for p in method("rft").plan(finished))
