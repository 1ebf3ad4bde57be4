"""`coevo run` under a launcher with two CPU processes (gloo): training on both, exploration and
evaluation split between them, one writer; the run equals the one-process run.

Two processes with `sft.batch_size` b train like one process accumulating two micro-batches
of b (tests/train/test_ddp.py), so the one-process run accumulates: the same optimizer steps.
The toy env's 8 tasks make SFT examples and DPO pairs that split evenly over two processes (an
uneven split pads one process's last batch, as accelerate does, which one process does not).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from coevo.run.processes import Processes
from coevo.store import Store
from tests.launch import launch, single

RECIPE = {
    "method": "eto",
    "iterations": 1,
    "env": {"name": "tests.toy_env:ToyEnv", "options": {"n_tasks": 8}},
    "model": {"size": "nano", "max_length": 512, "dtype": "float64", "device": "cpu"},
    "sft": {"epochs": 4, "batch_size": 2, "optim": {"lr": 3e-3}, "progress": False},
    "dpo": {"epochs": 1, "batch_size": 2, "optim": {"lr": 1e-3}, "progress": False},
    "explore": {"samples": 2, "sampling": {"max_new_tokens": 24}, "batch_size": 8, "chunk": 4},
    "eval": {"sampling": {"max_new_tokens": 24}, "batch_size": 8},
}


def coevo_run(recipe: dict, out: Path, *, processes: int) -> Path:
    """`coevo run` of `recipe` into `out`, as `processes` processes under torchrun or one."""
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(recipe))
    args = ["-m", "coevo", "run", str(path), "--out", str(out)]
    if processes > 1:
        launch(args, out.with_name(f"{out.name}-logs"), processes=processes)
    else:
        single(args)
    return out


def played(run_dir: Path) -> dict[str, list]:
    evals = [f"eval-{i}-test_{s}" for i in (0, 1) for s in ("seen", "unseen")]
    with Store(run_dir, create=False, readonly=True) as store:
        return {
            stage: [
                (t.task.id, t.sample, t.turns, t.reward) for t in store.trajectories(stage=stage)
            ]
            for stage in ("experts", "explore-1-target", *evals)
        }


@pytest.mark.slow
def test_two_processes_run_what_one_process_runs(tmp_path):
    two = coevo_run(RECIPE, tmp_path / "two", processes=2)
    one_recipe = {**RECIPE, "sft": {**RECIPE["sft"], "grad_accum": 2}}
    one_recipe["dpo"] = {**RECIPE["dpo"], "grad_accum": 2}
    one = coevo_run(one_recipe, tmp_path / "one", processes=1)
    got, expected = played(two), played(one)
    assert got == expected
    assert all(got.values())
    # The same weights after both training stages (to float rounding: gloo sums gradients).
    for stage in ("sft-target", "dpo-1-target"):
        a, b = (
            load_file(run / "stages" / stage / "model" / "model.safetensors") for run in (two, one)
        )
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-7)
    with Store(two, readonly=True) as s2, Store(one, readonly=True) as s1:
        pairs = len(s2.pairs(stage="dpo-1-target"))
        assert pairs == len(s1.pairs(stage="dpo-1-target")) and pairs % 4 == 0 < pairs


def test_a_process_plays_its_share_and_gets_every_episode_back():
    items = list(range(7))
    assert Processes(0, 2).share(items) == [0, 2, 4, 6]
    assert Processes(1, 2).share(items) == [1, 3, 5]
    assert Processes().share(items) == items and Processes().gather(items) == items
    assert Processes(1, 2, local_rank=1).device("cpu") == "cpu"


@pytest.mark.slow
def test_a_process_left_waiting_says_which_it_is_and_what_it_waited_for(tmp_path):
    script = Path(__file__).with_name("processes_script.py")
    with pytest.raises(AssertionError) as failed:
        launch([str(script)], tmp_path / "logs", timeout=300)
    assert "Process 0 of 2 stopped waiting for stage eval-0" in str(failed.value)
