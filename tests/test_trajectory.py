from __future__ import annotations

from dataclasses import replace

import pytest

from coevo.trajectory import Pair, Task, Trajectory, Turn


def make_trajectory(reward: float = 0.5, agent: str = "target", task_id: str = "t/1") -> Trajectory:
    task = Task(task_id, "toy", "train", "Type apple. ünïcödé", {"word": "apple", "n": [1, 2]})
    turns = (Turn("user", "Instruction: type apple"), Turn("assistant", "Thought: x\nAction: look"))
    return Trajectory(task, agent, turns, reward, True, False, 1, {"seed": 3, "info": {"a": 1}})


def test_trajectory_json_round_trip_is_lossless():
    traj = make_trajectory()
    back = Trajectory.from_json(traj.to_json())
    assert back == traj
    assert back.metadata == traj.metadata
    assert back.task.data == {"word": "apple", "n": [1, 2]}


def test_pair_round_trip_keeps_weights_and_kind():
    pair = Pair(make_trajectory(1.0, "expert"), make_trajectory(0.2), "expert_vs_target", 0.5, 0.1)
    back = Pair.from_json(pair.to_json())
    assert back == pair
    assert (back.kind, back.weight, back.sft_weight) == ("expert_vs_target", 0.5, 0.1)


def test_pair_of_different_tasks_is_refused():
    with pytest.raises(ValueError, match="one task"):
        Pair(make_trajectory(task_id="a"), make_trajectory(task_id="b"), "x")


def test_turn_role_is_validated():
    with pytest.raises(ValueError, match="role"):
        Turn("robot", "hi")  # type: ignore[arg-type]


def test_success_and_agent_texts():
    traj = make_trajectory(1.0)
    assert traj.success and traj.agent_texts == ["Thought: x\nAction: look"]
    assert not make_trajectory(0.99).success


def test_sampled_tokens_and_the_sample_index_round_trip():
    plain = make_trajectory()
    reply = Turn("assistant", plain.turns[1].text, token_ids=[5, 6, 7], logprobs=(-0.5, -1, -2.5))
    sampled = replace(plain, turns=(plain.turns[0], reply), sample=2)
    assert reply.token_ids == (5, 6, 7) and reply.logprobs == (-0.5, -1.0, -2.5)
    back = Trajectory.from_json(sampled.to_json())
    assert back == sampled and back.sample == 2 and back.turns[1].logprobs == reply.logprobs
    # A turn without them writes no such keys, and a dict without `sample` is sample 0.
    assert plain.to_dict()["turns"][1] == {"role": "assistant", "text": plain.turns[1].text}
    del_sample = {k: v for k, v in plain.to_dict().items() if k != "sample"}
    assert Trajectory.from_dict(del_sample).sample == 0


def test_sampled_tokens_are_checked():
    with pytest.raises(ValueError, match="one log-prob per id"):
        Turn("assistant", "x", token_ids=(1, 2), logprobs=(-1.0,))
    with pytest.raises(ValueError, match="one log-prob per id"):
        Turn("assistant", "x", logprobs=(-1.0,))
    with pytest.raises(ValueError, match="Only an agent"):
        Turn("user", "x", token_ids=(1,))
