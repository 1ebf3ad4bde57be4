"""How an episode becomes a conversation: the messages the agent sees, and replaying a script.

The rollout loop and the expert replay both build their user messages here, so an expert
trajectory and a model's trajectory have exactly the same text around the agent's turns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from coevo.envs.base import Env, StepResult
from coevo.trajectory import Task, Trajectory, Turn


def opening_message(env: Env, observation: str) -> str:
    """The first user message: the env's instructions, then the reset observation."""
    return f"{env.instruction_prompt.rstrip()}\n\n{observation}"


def observation_message(observation: str) -> str:
    """A user message after an agent turn."""
    return f"Observation: {observation}"


def replay(
    env: Env,
    task: Task,
    replies: Iterable[str],
    *,
    agent: str = "expert",
    seed: int | None = None,
    on_step: Callable[[StepResult], None] | None = None,
) -> Trajectory:
    """Play `replies` (agent texts) on `task` until they run out or the episode ends.

    `replies` may be a generator that looks at the env between steps (an explorer choosing
    among the actions valid now); `on_step` sees every step's result."""
    observation, info = env.reset(task, seed=seed)
    turns = [Turn("user", opening_message(env, observation))]
    result = StepResult(observation, 0.0, False, False, info)
    steps = 0
    for reply in replies:
        result = env.step(reply)
        steps += 1
        if on_step is not None:
            on_step(result)
        turns.append(Turn("assistant", reply))
        if result.done:
            break
        turns.append(Turn("user", observation_message(result.observation)))
    return Trajectory(
        task=task,
        agent=agent,
        turns=tuple(turns),
        reward=float(result.reward),
        terminated=result.terminated,
        truncated=result.truncated,
        steps=steps,
        metadata={"info": result.info, "final_observation": result.observation},
    )


def expert_trajectory(env: Env, task: Task) -> Trajectory:
    """The env's expert demonstration for `task`, replayed into a Trajectory."""
    return replay(env, task, [t.text for t in env.expert(task)], agent="expert")
