"""Failure-agent co-evolution (the paper's method) and its two second-agent ablations.

Two agents start from independent SFT runs (different seeds) on the expert data. Each
iteration both explore the training tasks; the second agent trains first, then the target,
each with ETO's schedule of preference phases (`eto.dpo_settings`):

- `failure_agent`: the failure agent takes plain DPO on failure-vs-failure pairs of both agents
  (Eq. 6-7), so it learns to produce near-success failures (hard negatives); the target takes
  the weighted DPO + SFT objective on expert-vs-prediction and failure-vs-failure pairs
  (Eq. 8-9, `failure_agent.lambda_sft`).
- `positive_agent` (ablation): the second agent is trained like ETO (expert vs its predictions).
- `frozen_failure` (ablation): the second agent is never updated after SFT.
"""

from __future__ import annotations

from collections.abc import Callable

from coevo.methods.eto import dpo_settings
from coevo.pairs import eto_pairs, failure_pairs, target_pairs, why_no_pairs
from coevo.run.context import Run
from coevo.seeds import trainer_seed
from coevo.stages import play, training
from coevo.stages.shared import base_model, shared_start
from coevo.trajectory import Pair, Trajectory

# The second agent's pairs of an iteration, from the experts, the target's rollouts, its own
# rollouts and whether to pair failures within one agent.
SecondPairs = Callable[
    [dict[str, Trajectory], list[Trajectory], list[Trajectory], bool], list[Pair]
]


def failure_agent_pairs(
    experts: dict[str, Trajectory], target: list[Trajectory], own: list[Trajectory], within: bool
) -> list[Pair]:
    """Eq. 6: failure vs failure across both agents (and within one, with several samples)."""
    return failure_pairs(target, own, within_agent=within)


def positive_agent_pairs(
    experts: dict[str, Trajectory], target: list[Trajectory], own: list[Trajectory], within: bool
) -> list[Pair]:
    """ETO's pairs: the expert against the agent's own predictions."""
    return eto_pairs(experts, own)


def run_failure_agent(run: Run) -> None:
    co_evolve(run, "failure", failure_agent_pairs)


def run_positive_agent(run: Run) -> None:
    co_evolve(run, "positive", positive_agent_pairs)


def run_frozen_failure(run: Run) -> None:
    co_evolve(run, "failure", None)  # the second agent is never trained


def co_evolve(run: Run, second_name: str, second_pairs: SecondPairs | None) -> None:
    cfg = run.config
    start = shared_start(run)
    target, experts = start.target, start.experts
    # The second agent: its own initialisation (for a local model) and SFT seed.
    second_seed = trainer_seed(cfg.seed, second_name)  # its own SFT run, not the next seed's
    second_base = base_model(run, agent=second_name)
    second = training.sft(run, second_name, second_base, list(experts.values()), second_seed)
    train = run.tasks("train")
    within = cfg.failure_agent.within_agent_pairs and cfg.explore.samples > 1
    for iteration in range(1, cfg.iterations + 1):
        target_rollouts = play.explore(run, target, "target", iteration, train)
        second_rollouts = play.explore(run, second, second_name, iteration, train)
        settings, seed = dpo_settings(cfg, iteration), trainer_seed(cfg.seed, "dpo", iteration)

        if second_pairs is not None:
            pairs = second_pairs(experts, target_rollouts, second_rollouts, within)
            # The positive agent pairs its own rollouts with the expert; the failure agent
            # pairs the failures of both agents.
            own = second_pairs is positive_agent_pairs
            why = why_no_pairs(
                second_rollouts if own else target_rollouts + second_rollouts, against_expert=own
            )
            second = training.dpo(
                run, second_name, second, pairs, iteration, settings, seed, why_none=why
            )

        pairs = target_pairs(
            experts,
            target_rollouts,
            second_rollouts,
            lambda_sft=cfg.failure_agent.lambda_sft,
            second_name=second_name,
            within_agent=within,
        )
        why = why_no_pairs(target_rollouts + second_rollouts, against_expert=True)
        target = training.dpo(run, "target", target, pairs, iteration, settings, seed, why_none=why)
        play.evaluate(run, target, iteration)
