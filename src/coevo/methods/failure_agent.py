"""Failure-agent co-evolution (the paper's method) and its two second-agent ablations.

Two agents start from independent SFT runs (different seeds) on the expert data. Each
iteration both explore the training tasks; the second agent trains first, then the target:

- `failure_agent`: the failure agent takes plain DPO on failure-vs-failure pairs of both agents
  (Eq. 6-7), so it learns to produce near-success failures (hard negatives); the target takes
  the weighted DPO + SFT objective on expert-vs-prediction and failure-vs-failure pairs
  (Eq. 8-9).
- `positive_agent` (ablation): the second agent is trained like ETO (expert vs its predictions).
- `frozen_failure` (ablation): the second agent is never updated after SFT.
"""

from __future__ import annotations

from coevo.methods import stages
from coevo.methods.stages import Run
from coevo.pairs import eto_pairs, failure_pairs, target_pairs

SECOND_AGENT = {
    "failure_agent": "failure",
    "positive_agent": "positive",
    "frozen_failure": "failure",
}


def run_failure_agent(run: Run) -> None:
    cfg = run.config
    second_name = SECOND_AGENT[cfg.method]
    experts = stages.experts(run)
    base = stages.base_model(run)
    demos = list(experts.values())
    target = stages.sft(run, "target", base, demos, seed=cfg.seed)
    second_base = stages.base_model(run, seed=cfg.seed + 1)
    second = stages.sft(run, second_name, second_base, demos, seed=cfg.seed + 1)
    stages.evaluate(run, target, iteration=0)
    train = run.tasks("train")
    within = cfg.within_agent_pairs and cfg.explore.samples > 1
    for iteration in range(1, cfg.iterations + 1):
        target_rollouts = stages.explore(run, target, "target", iteration, train)
        second_rollouts = stages.explore(run, second, second_name, iteration, train)

        if cfg.method == "failure_agent":
            second_pairs = failure_pairs(target_rollouts, second_rollouts, within_agent=within)
            second = stages.dpo(run, second_name, second, second_pairs, iteration)
        elif cfg.method == "positive_agent":
            second = stages.dpo(
                run, second_name, second, eto_pairs(experts, second_rollouts), iteration
            )

        pairs = target_pairs(
            experts,
            target_rollouts,
            second_rollouts,
            lambda_sft=cfg.lambda_sft,
            second_name=second_name,
            within_agent=within,
        )
        target = stages.dpo(run, "target", target, pairs, iteration)
        stages.evaluate(run, target, iteration)
