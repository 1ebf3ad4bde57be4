from __future__ import annotations

from coevo.envs.conversation import expert_trajectory, replay
from tests.toy_env import ToyEnv


def test_expert_trajectory_alternates_and_ends_on_agent_turn():
    env = ToyEnv()
    task = env.tasks("train")[0]
    traj = expert_trajectory(env, task)
    assert traj.reward == 1.0 and traj.terminated and not traj.truncated and traj.steps == 2
    roles = [t.role for t in traj.turns]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert traj.turns[0].text.startswith(env.instruction_prompt)
    assert traj.turns[2].text == "Observation: The word is apple."
    assert traj.metadata["final_observation"] == "You typed apple."


def test_replay_stops_at_budget():
    env = ToyEnv(max_steps=3)
    traj = replay(env, env.tasks("train")[0], ["look"] * 10, agent="target")
    assert traj.steps == 3 and traj.truncated and not traj.terminated and traj.reward == 0.0
    assert traj.agent == "target"
