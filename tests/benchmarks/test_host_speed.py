"""benchmarks/host_speed.py: a rollout's host seconds, with a policy that costs nothing."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def test_host_speed_splits_a_whole_rollout(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    host_speed = importlib.import_module("host_speed")
    lines = host_speed.main(["--tasks", "3", "--batch-size", "2", "--repeats", "2"])
    rows = {
        m[1]: (float(m[2]), int(m[3].replace(",", "") or 0))
        for m in (
            re.match(r"\| (.+?) \| ([\d.]+) \| \d+% \| ?([\d,]*) ?\|", line) for line in lines
        )
        if m
    }
    # Random replies never act: each of the 3 episodes runs to shop's 15-step budget, 2 at a
    # time, so the env pool steps 2, 2, ..., then the third alone: 15 + 15 calls.
    assert "45 env steps" in lines[0]
    assert rows["env steps"][1] == 30
    assert rows["prompts (header, budget, assembly)"][1] == 45
    # each episode's opening, its 15 replies and the 14 observations before the last reply
    assert rows["appending turns (the chat template)"][1] == 3 * (1 + 15 + 14)
    whole = rows.pop("whole rollout")[0]
    assert len(rows) == 6 and all(0 <= sec <= whole for sec, _ in rows.values())
    assert lines[-1].startswith("host: ") and capsys.readouterr().out.strip().endswith(lines[-1])
