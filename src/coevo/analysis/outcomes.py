"""What a set of episodes shows: outcome shares (the paper's Table 2) and how the agent acted.

success: r = 1; hard negative: threshold <= r < 1 (0.6 in the paper); failure: r < threshold.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from coevo.run.records import EpisodeStats
from coevo.trajectory import Trajectory, is_success

OUTCOMES: tuple[str, ...] = ("success", "hard_negative", "failure")


def outcome(reward: float, threshold: float = 0.6) -> str:
    if is_success(reward):
        return "success"
    return "hard_negative" if reward >= threshold else "failure"


def outcome_shares(rewards: Iterable[float], threshold: float = 0.6) -> dict[str, float]:
    """Share of each outcome among `rewards` (all zeros for an empty list)."""
    counts = dict.fromkeys(OUTCOMES, 0)
    n = 0
    for reward in rewards:
        counts[outcome(reward, threshold)] += 1
        n += 1
    return {k: (v / n if n else 0.0) for k, v in counts.items()}


def episode_stats(trajectories: Sequence[Trajectory]) -> EpisodeStats:
    """Mean reward and steps, and per-step rates of format errors and invalid actions.

    The rates are read from what the rollout recorded in each trajectory's metadata; episodes
    without those counts (e.g. expert replays) count as having none.
    """
    steps = sum(t.steps for t in trajectories)
    format_errors = sum(t.metadata.get("format_errors", 0) for t in trajectories)
    invalid = sum(t.metadata.get("invalid_actions", 0) for t in trajectories)
    return EpisodeStats(
        reward=statistics.fmean(t.reward for t in trajectories) if trajectories else 0.0,
        success=statistics.fmean(t.success for t in trajectories) if trajectories else 0.0,
        n=len(trajectories),
        mean_steps=steps / len(trajectories) if trajectories else 0.0,
        format_error_rate=format_errors / steps if steps else 0.0,
        invalid_action_rate=invalid / steps if steps else 0.0,
    )
