"""SFT: behaviour cloning on the expert trajectories, agent tokens only (Eq. 3-5)."""

from __future__ import annotations

from coevo.methods import stages
from coevo.methods.stages import Run


def run_sft(run: Run) -> None:
    experts = stages.experts(run)
    base = stages.base_model(run)
    target = stages.sft(run, "target", base, list(experts.values()), seed=run.config.seed)
    stages.evaluate(run, target, iteration=0)
