"""ETO: iterations of explore with the target, expert-vs-prediction pairs, DPO.

The reference of each DPO phase is the policy at the iteration's start.
"""

from __future__ import annotations

from coevo.methods import stages
from coevo.methods.stages import Run
from coevo.pairs import eto_pairs


def run_eto(run: Run) -> None:
    experts = stages.experts(run)
    base = stages.base_model(run)
    target = stages.sft(run, "target", base, list(experts.values()), seed=run.config.seed)
    stages.evaluate(run, target, iteration=0)
    train = run.tasks("train")
    for iteration in range(1, run.config.iterations + 1):
        rollouts = stages.explore(run, target, "target", iteration, train)
        target = stages.dpo(run, "target", target, eto_pairs(experts, rollouts), iteration)
        stages.evaluate(run, target, iteration)
