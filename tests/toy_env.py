"""A tiny deterministic env for tests that need the Env contract but not a real benchmark.

Task: type a given word. `type[word]` ends the episode: reward 1.0 for the word, 0.5 for a
word with the same first letter, else 0. `look` shows the word again. Budget: 5 steps.

For agent_data it synthesizes, from any exploration of a task, the task of typing that task's
word twice over (a new word that its expert solves).
"""

from __future__ import annotations

from typing import Any

from coevo.envs.base import EpisodeClock, StepResult, check_split
from coevo.envs.react import FORMAT_ERROR, format_reply, parse
from coevo.trajectory import Task, Turn

WORDS = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel"]


class ToyEnv:
    name = "toy"
    instruction_prompt = "Type the word you are given. Actions: look, type[word]."

    def __init__(self, max_steps: int = 5, n_tasks: int = 8) -> None:
        self.max_steps = max_steps
        self.n_tasks = n_tasks
        self._clock = EpisodeClock(max_steps)
        self._task: Task | None = None

    def tasks(self, split: str) -> list[Task]:
        offset = {"train": 0, "test_seen": 1, "test_unseen": 2}[check_split(split)]
        return [
            Task(f"toy/{split}/{i}", "toy", split, f"Type {w}.", {"word": w})
            for i, w in enumerate((WORDS[offset:] + WORDS[:offset])[: self.n_tasks])
        ]

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self._task = task
        self._clock.start()
        return f"Instruction: {task.instruction}", {}

    def step(self, action: str) -> StepResult:
        self._clock.tick()
        parsed = parse(action)
        word = self._task.data["word"]
        reward, terminated = 0.0, False
        if not parsed.ok:
            obs = FORMAT_ERROR
        elif parsed.action == "look":
            obs = f"The word is {word}."
        elif parsed.action.startswith("type[") and parsed.action.endswith("]"):
            typed = parsed.action[5:-1]
            reward = 1.0 if typed == word else 0.5 if typed[:1] == word[:1] else 0.0
            obs, terminated = f"You typed {typed}.", True
        else:
            obs = f"Invalid action {parsed.action[:50]!r}: use look or type[word]."
        truncated = self._clock.finish(terminated)
        return StepResult(obs, reward, terminated, truncated, {"word": word})

    def expert(self, task: Task) -> list[Turn]:
        return [
            Turn("assistant", format_reply("I check the word.", "look")),
            Turn("assistant", format_reply("I type it.", f"type[{task.data['word']}]")),
        ]

    def tasks_from_exploration(self, trajectory: Any) -> list[Any]:
        from coevo.envs.evolve import Candidate

        word = trajectory.task.data["word"] * 2
        task = Task("toy/synth", "toy", "train", f"Type {word}.", {"word": word})
        return [Candidate(task, {"from": trajectory.task.data["word"]})]

    def close(self) -> None:
        pass
