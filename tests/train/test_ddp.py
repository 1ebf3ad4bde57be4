"""Two CPU processes under `accelerate launch` train exactly like one process accumulating two
micro-batches: same global batches, same token/pair normalisation, same losses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launch import launch, single

SCRIPT = Path(__file__).with_name("ddp_script.py")


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_two_processes_match_one_process_with_accumulation(tmp_path):
    launch([str(SCRIPT), str(tmp_path / "ddp"), "2", "1"], tmp_path / "ddp-logs", timeout=600)
    single([str(SCRIPT), str(tmp_path / "one"), "2", "2"], timeout=600)
    ddp, one = summary(tmp_path / "ddp"), summary(tmp_path / "one")
    # Global batches [b0, b1, b2, ...]: process p takes b_p, b_p+2, ...; one process
    # accumulating 2 micro-batches takes (b0, b1), (b2, b3), ...: the same optimizer steps.
    assert ddp["sft"] == pytest.approx(one["sft"], rel=1e-5)
    assert ddp["dpo"] == pytest.approx(one["dpo"], rel=1e-5)
    assert ddp["weight_sum"] == pytest.approx(one["weight_sum"], rel=1e-5)
