"""Preference pairs of every method, with their per-pair DPO weight and SFT weight.

- ETO: expert vs prediction when the prediction scores lower; reversed when it scores higher;
  ties dropped.
- Failure agent (Eq. 6): per instruction, every target failure x failure-agent failure with
  different rewards, the higher-reward one chosen; optionally within-agent failure pairs too.
- Target (Eq. 8-9): expert vs target prediction and expert vs failure-agent prediction (the
  expert-vs-prediction pairs of one instruction share a total weight of 1.0 and carry SFT
  weight `lambda_sft`), plus failure-vs-failure pairs (weight 1.0, SFT weight 0).

A failure is a trajectory with reward < 1. Every pair records its `kind`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from itertools import combinations, product

from coevo.trajectory import Pair, Trajectory

# Two rewards closer than this count as a tie (env rewards are rounded to a few decimals).
TIE = 1e-9


def by_task(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    """Group trajectories by task id, keeping their order."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        groups[trajectory.task.id].append(trajectory)
    return dict(groups)


def failures(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    return [t for t in trajectories if not t.success]


def ordered(a: Trajectory, b: Trajectory) -> tuple[Trajectory, Trajectory] | None:
    """(chosen, rejected) by reward, or None on a tie."""
    if abs(a.reward - b.reward) <= TIE:
        return None
    return (a, b) if a.reward > b.reward else (b, a)


def expert_vs_predictions(
    expert: Trajectory,
    predictions: Iterable[Trajectory],
    *,
    kind: str,
    weight: float = 1.0,
    sft_weight: float = 0.0,
) -> list[Pair]:
    """ETO's rule: expert chosen over a worse prediction, a better prediction over the expert."""
    pairs = []
    for prediction in predictions:
        pair = ordered(expert, prediction)
        if pair is None:
            continue
        chosen, rejected = pair
        reversed_ = chosen is not expert
        pairs.append(
            Pair(
                chosen,
                rejected,
                kind=f"{kind}_reversed" if reversed_ else kind,
                weight=weight,
                sft_weight=sft_weight,
            )
        )
    return pairs


def eto_pairs(experts: dict[str, Trajectory], predictions: Iterable[Trajectory]) -> list[Pair]:
    """ETO: expert vs each prediction of the same task (weight 1, no SFT term)."""
    pairs = []
    for task_id, group in by_task(predictions).items():
        if task_id in experts:
            pairs += expert_vs_predictions(experts[task_id], group, kind="expert_vs_prediction")
    return pairs


def failure_pairs(
    first: Iterable[Trajectory],
    second: Iterable[Trajectory],
    *,
    within_agent: bool = False,
) -> list[Pair]:
    """Eq. 6: failure-vs-failure pairs of the same task, higher reward chosen, ties dropped.

    Cross pairs take one failure from each side (`first` x `second`); `within_agent` adds the
    pairs among one side's own failures of a task (useful when k > 1 samples are drawn).
    """
    firsts, seconds = by_task(failures(first)), by_task(failures(second))
    pairs = []
    for task_id in sorted(firsts.keys() | seconds.keys()):
        a, b = firsts.get(task_id, []), seconds.get(task_id, [])
        candidates = list(product(a, b))
        if within_agent:
            candidates += list(combinations(a, 2)) + list(combinations(b, 2))
        for x, y in candidates:
            pair = ordered(x, y)
            if pair is not None:
                pairs.append(Pair(*pair, kind="failure_vs_failure", weight=1.0, sft_weight=0.0))
    return pairs


def target_pairs(
    experts: dict[str, Trajectory],
    target: Iterable[Trajectory],
    second: Iterable[Trajectory],
    *,
    lambda_sft: float = 0.1,
    second_name: str = "failure",
    within_agent: bool = False,
) -> list[Pair]:
    """Eq. 8-9: the target's pairs from its own and the second agent's rollouts.

    The expert-vs-prediction pairs of one instruction (from both agents) share a total weight
    of 1.0 so tasks with many samples do not dominate; each carries `lambda_sft`. The
    failure-vs-failure pairs get weight 1.0 and SFT weight 0 (no imitation of failures).
    """
    target, second = list(target), list(second)
    targets, seconds = by_task(target), by_task(second)
    pairs: list[Pair] = []
    for task_id in sorted(targets.keys() | seconds.keys()):
        expert = experts.get(task_id)
        if expert is None:
            continue
        group = expert_vs_predictions(
            expert, targets.get(task_id, []), kind="expert_vs_target"
        ) + expert_vs_predictions(expert, seconds.get(task_id, []), kind=f"expert_vs_{second_name}")
        pairs += [replace(p, weight=1.0 / len(group), sft_weight=lambda_sft) for p in group]
    return pairs + failure_pairs(target, second, within_agent=within_agent)


def why_no_pairs(rollouts: Iterable[Trajectory], *, against_expert: bool) -> str:
    """Why a preference stage got no pair from `rollouts`, in words for the run's log.

    `against_expert`: the stage pairs the expert with predictions (ETO, the target); else it
    pairs failures with failures (the failure agent).
    """
    rollouts = list(rollouts)
    fails = failures(rollouts)
    if not rollouts:
        return "there were no rollouts"
    if not fails:
        return f"all {len(rollouts)} rollouts succeeded, so none is worse than another"
    if against_expert:
        return "no task that failed has an expert demonstration"
    rewards = {round(t.reward, 6) for t in fails}
    if len(rewards) == 1:
        return (
            f"every one of the {len(fails)} failures scored {rewards.pop():g}, and a "
            "failure-vs-failure pair needs two different rewards"
        )
    return (
        f"no two failures of one task (across the agents) differ in reward ({len(fails)} "
        f"failures on {len(by_task(fails))} tasks)"
    )
