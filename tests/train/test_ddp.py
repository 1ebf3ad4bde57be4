"""Two CPU processes under `accelerate launch` train exactly like one process accumulating two
micro-batches: same global batches, same token/pair normalisation, same losses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("ddp_script.py")
ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], out: Path) -> dict:
    # ACCELERATE_USE_CPU: torchrun's processes become accelerate's MULTI_CPU (gloo) setup,
    # the same DDP code path `accelerate launch` takes on GPUs.
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "ACCELERATE_USE_CPU": "true",
    }
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_two_processes_match_one_process_with_accumulation(tmp_path):
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    ddp = run([*launch, str(SCRIPT), str(tmp_path / "ddp"), "2", "1"], tmp_path / "ddp")
    one = run([sys.executable, str(SCRIPT), str(tmp_path / "one"), "2", "2"], tmp_path / "one")
    # Global batches [b0, b1, b2, ...]: process p takes b_p, b_p+2, ...; one process
    # accumulating 2 micro-batches takes (b0, b1), (b2, b3), ...: the same optimizer steps.
    assert ddp["sft"] == pytest.approx(one["sft"], rel=1e-5)
    assert ddp["dpo"] == pytest.approx(one["dpo"], rel=1e-5)
    assert ddp["weight_sum"] == pytest.approx(one["weight_sum"], rel=1e-5)
