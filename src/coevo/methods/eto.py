"""ETO: iterations of explore with the target, expert-vs-prediction pairs, DPO.

The reference of each DPO phase is the policy at the iteration's start. ETO's schedule of
preference phases (`dpo_settings`: from the second iteration on, `eto.later_lr` and
`eto.later_beta`) is followed by the failure-agent methods too.
"""

from __future__ import annotations

from dataclasses import replace

from coevo.pairs import eto_pairs, why_no_pairs
from coevo.run.context import Run
from coevo.run.recipe import RunConfig
from coevo.seeds import trainer_seed
from coevo.stages import play, training
from coevo.stages.shared import shared_start
from coevo.train.dpo import DpoConfig


def dpo_settings(config: RunConfig, iteration: int) -> DpoConfig:
    """The DPO settings of `iteration`'s preference phase: the dpo section's, with the learning
    rate and beta of `eto` from the second iteration on (ETO: 1e-6 then 5e-7, 0.1 then 0.5)."""
    dpo, eto = config.dpo, config.eto
    if iteration < 2:
        return dpo
    lr = eto.later_lr if eto.later_lr is not None else dpo.optim.lr
    beta = eto.later_beta if eto.later_beta is not None else dpo.beta
    return replace(dpo, beta=beta, optim=replace(dpo.optim, lr=lr))


def run_eto(run: Run) -> None:
    cfg = run.config
    start = shared_start(run)
    target = start.target
    train = run.tasks("train")
    for iteration in range(1, cfg.iterations + 1):
        explored = play.explore(run, target, "target", iteration, train)
        pairs = eto_pairs(start.experts, explored)
        settings, seed = dpo_settings(cfg, iteration), trainer_seed(cfg.seed, "dpo", iteration)
        why = why_no_pairs(explored, against_expert=True)
        target = training.dpo(run, "target", target, pairs, iteration, settings, seed, why_none=why)
        play.evaluate(run, target, iteration)
