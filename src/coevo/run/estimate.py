"""The time a run has left: the rates of its finished stages times the work still planned.

A stage's work is counted in what its time goes to: episodes played (explorations,
evaluations), or optimizer steps of SFT, DPO and GRPO (a GRPO step with its rollouts). A
finished stage's rate is its manifest's `seconds` over the work its record says it did
(`measured`), loading and saving models included. A planned stage counts only when its size is
known exactly and its kind of work has been timed; the others are named instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevo.run.console import duration

EPISODE, SFT, DPO, GRPO = "episode", "SFT step", "DPO step", "GRPO step"
ARTICLE = {EPISODE: "an", SFT: "an", DPO: "a", GRPO: "a"}  # "an S-F-T step"


@dataclass(frozen=True)
class Planned:
    """One stage a run will run, and how much work it is (`coevo.methods.plan`)."""

    name: str
    what: str
    """The work in words: `16 episodes (8 train tasks x 2 samples)`."""
    work: str = ""
    """What its time is counted in: EPISODE, SFT, DPO or GRPO ('': not counted)."""
    units: int | None = None
    """How many of `work` (None: not known before the stage runs)."""
    exact: bool = True
    """False: `units` is an upper bound that earlier stages' findings decide."""


def measured(outputs: dict[str, Any]) -> tuple[str, int] | None:
    """(work, units) a finished stage did, from its record's outputs: None for stages not
    counted (experts, a model made, an agent-data round, a DPO stage skipped for want of pairs)."""
    kind = outputs.get("kind")
    if kind == "sft":
        return SFT, int(outputs.get("steps", 0))
    if kind == "dpo" and not outputs.get("skipped"):
        return DPO, int(outputs.get("steps", 0))
    if kind == "grpo":
        return GRPO, int(outputs.get("steps", 0)) - int(outputs.get("first_step", 1)) + 1
    if kind == "explore":
        return EPISODE, int(outputs.get("episodes", 0))
    if kind == "eval":
        return EPISODE, sum(int(s.get("n", 0)) for s in outputs.get("splits", {}).values())
    return None


def rates(run_dir: Path) -> dict[str, float]:
    """Seconds per unit of each kind of work over the run's finished stages."""
    seconds: dict[str, float] = {}
    units: dict[str, int] = {}
    for path in (Path(run_dir) / "stages").glob("*/manifest.json"):
        try:
            record = json.loads(path.read_text())
            done = measured(record.get("outputs") or {})
            took = float(record["seconds"])
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # a damaged manifest, or one from before stages were timed
        if done is not None and done[1] > 0:
            seconds[done[0]] = seconds.get(done[0], 0.0) + took
            units[done[0]] = units.get(done[0], 0) + done[1]
    return {work: seconds[work] / units[work] for work in seconds}


def time_left(name: str, run_dir: Path, todo: list[Planned]) -> str | None:
    """The line that says how long run `name`'s stages still `todo` should take, or None
    while none of them can be counted."""
    known = rates(run_dir)
    left, timed, untimed = 0.0, set(), []
    for p in todo:
        if p.units is not None and p.exact and p.work in known:
            left += p.units * known[p.work]
            timed.add(p.work)
        elif p.work:
            untimed.append(p.name)
    if not timed:
        return None
    at = ", ".join(f"{_rate(known[w])} {ARTICLE[w]} {w}" for w in ARTICLE if w in timed)
    rest = f"; not counted: {', '.join(untimed)} (size or rate not known yet)" if untimed else ""
    stages = f"{len(todo)} stage{'s' * (len(todo) != 1)}"
    return f"{name}: about {duration(left)} left in {stages} (at this run's {at}){rest}"


def _rate(seconds: float) -> str:
    return f"{seconds:.2g} s" if seconds < 10 else duration(seconds)
