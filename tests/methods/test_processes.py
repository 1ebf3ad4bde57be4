"""`coevo run` under a launcher with two CPU processes (gloo): training on both, exploration and
evaluation split between them, one writer; the run equals the one-process run.

Two processes with `sft.batch_size` b train like one process accumulating two micro-batches
of b (tests/train/test_ddp.py), so the one-process run accumulates: the same optimizer steps.
The toy env's 8 tasks make SFT examples and DPO pairs that split evenly over two processes (an
uneven split pads one process's last batch, as accelerate does, which one process does not).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from coevo.methods.processes import Processes
from coevo.store import Store

ROOT = Path(__file__).resolve().parents[2]

RECIPE = {
    "method": "eto",
    "iterations": 1,
    "env": {"name": "tests.toy_env:ToyEnv", "options": {"n_tasks": 8}},
    "model": {"size": "nano", "max_length": 512, "dtype": "float64", "device": "cpu"},
    "sft": {"epochs": 4, "batch_size": 2, "optim": {"lr": 3e-3}, "progress": False},
    "dpo": {"epochs": 1, "batch_size": 2, "optim": {"lr": 1e-3}, "progress": False},
    "explore": {"samples": 2, "max_new_tokens": 24, "batch_size": 8, "chunk": 4},
    "eval": {"max_new_tokens": 24, "batch_size": 8},
}


def coevo_run(launch: list[str], recipe: dict, out: Path) -> Path:
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(recipe))
    # ACCELERATE_USE_CPU: the launcher's processes become accelerate's MULTI_CPU (gloo) setup.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    args = [*launch, "-m", "coevo", "run", str(path), "--out", str(out)]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
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
    two = coevo_run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"],
        RECIPE,
        tmp_path / "two",
    )
    one_recipe = {**RECIPE, "sft": {**RECIPE["sft"], "grad_accum": 2}}
    one_recipe["dpo"] = {**RECIPE["dpo"], "grad_accum": 2}
    one = coevo_run([sys.executable], one_recipe, tmp_path / "one")
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
