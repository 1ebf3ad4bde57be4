"""The weakness signals on hand-built histories, edge cases included."""

from __future__ import annotations

import pytest

from coevo.envs.evolve import first_word
from coevo.methods.agent_data.signals import (
    boundary,
    forgetting,
    history_of,
    rare,
    rare_can_fire,
    step_signals,
)
from coevo.trajectory import Task, Trajectory, Turn


def task(i: int) -> Task:
    return Task(f"t/{i}", "toy", "train", f"Type word {i}.", {"word": f"w{i}"})


def played(i: int, reward: float, actions: tuple[str, ...] = ("look",), sample: int = 0):
    turns = [Turn("user", "start")]
    for a in actions:
        turns += [Turn("assistant", f"Thought: t\nAction: {a}"), Turn("user", "Observation: x")]
    return Trajectory(
        task(i), "target", tuple(turns), reward, True, False, len(actions), {}, sample
    )


def group(i: int, rewards: list[float], actions=("look",)) -> list[Trajectory]:
    return [played(i, r, actions, k) for k, r in enumerate(rewards)]


def test_boundary_needs_both_a_success_and_a_failure_in_one_group():
    step = group(0, [1.0, 0.0, 0.5, 0.2]) + group(1, [1.0, 1.0]) + group(2, [0.0, 0.49])
    (signal,) = boundary(step)
    assert signal.kind == "boundary" and signal.task.id == "t/0"
    assert signal.trajectories == (0, 1, 2, 3)
    assert signal.detail["rewards"] == [1.0, 0.0, 0.5, 0.2]


def test_all_equal_groups_give_no_boundary():
    assert boundary(group(0, [1.0] * 4) + group(1, [0.0] * 4) + group(2, [0.7, 0.5])) == []


def test_forgetting_looks_at_the_last_w_attempts_only():
    step = group(0, [0.0, 0.0]) + group(1, [0.0]) + group(2, [1.0]) + group(3, [0.25, 0.5])
    history = {
        "t/0": [1.0, 0.0, 0.0, 0.0, 0.0],  # its success is 5 attempts back: out of a window of 4
        "t/1": [0.0, 0.6],  # window not full yet: the two it has are looked at
        "t/2": [1.0],  # solved now: not forgotten
        "t/3": [1.0],  # mean of this step 0.375 < 0.5: forgotten
    }
    signals = forgetting(history, step, window=4)
    assert [s.task.id for s in signals] == ["t/1", "t/3"]
    assert signals[1].trajectories == (4, 5)
    assert signals[0].detail == {"current": 0.0, "recent": [0.0, 0.6]}
    assert forgetting({}, step, window=4) == []  # no history: nothing to forget
    assert [s.task.id for s in forgetting(history, step, window=5)] == ["t/0", "t/1", "t/3"]
    with pytest.raises(ValueError, match="window"):
        forgetting(history, step, window=0)


def test_history_is_the_mean_reward_of_each_earlier_step():
    steps = [group(0, [1.0, 0.0]), group(0, [0.0, 0.0]) + group(1, [1.0])]
    assert history_of(steps) == {"t/0": [0.5, 0.0], "t/1": [1.0]}


def test_rare_patterns_are_below_theta_percent_but_seen():
    step = [played(i, 0.0, ("look",), 0) for i in range(19)]
    step.append(played(19, 1.0, ("look", "type[x]"), 0))  # type: 1 of 20 = 5 %
    assert rare(step, first_word, theta=5) == []  # not *below* 5 %
    (signal,) = rare(step, first_word, theta=6)
    assert signal.detail == {"pattern": "type", "share": 0.05}
    assert signal.task.id == "t/19" and signal.trajectories == (19,)


@pytest.mark.parametrize(("n", "theta", "fires"), [(16, 5, False), (20, 5, False), (21, 5, True)])
def test_rare_can_fire_only_where_one_trajectory_is_under_theta(n, theta, fires):
    # What the loop warns about: shop's CPU-size GRPO (4 tasks x 4 samples) at theta 5.
    assert rare_can_fire(n, theta) is fires
    step = [played(i, 0.0) for i in range(n - 1)] + [played(n, 0.0, ("type[x]",))]
    assert bool(rare(step, first_word, theta)) is fires


def test_a_pattern_in_every_trajectory_is_not_rare():
    step = [played(i, 0.0, ("look", "look")) for i in range(10)]
    assert rare(step, first_word, theta=100) == []


def test_rare_names_every_task_that_used_the_pattern():
    step = group(0, [0.0, 0.0], ("look", "type[a]")) + [played(1, 0.0, ("type[b]",))]
    step += [played(i, 0.0) for i in range(2, 20)]
    signals = rare(step, first_word, theta=20)  # type: 3 of 21
    assert [(s.task.id, s.trajectories) for s in signals] == [("t/0", (0, 1)), ("t/1", (2,))]
    with pytest.raises(ValueError, match="theta"):
        rare(step, first_word, theta=0)


def test_step_signals_keeps_the_kinds_asked_for():
    earlier = [group(0, [1.0, 1.0])]
    step = group(0, [0.0, 0.0]) + group(1, [1.0, 0.0])
    kinds = lambda **kw: sorted(  # noqa: E731
        s.kind for s in step_signals(earlier, step, pattern=first_word, window=4, theta=5, **kw)
    )
    assert kinds() == ["boundary", "forgetting"]
    assert kinds(kinds=["forgetting"]) == ["forgetting"]
    assert kinds(kinds=["rare"]) == []


def test_default_action_pattern_is_the_first_word():
    assert first_word("type[apple]") == "type"
    assert first_word("  Look around") == "look"
    assert first_word("cd(folder='x')") == "cd"
    assert first_word("") == ""
