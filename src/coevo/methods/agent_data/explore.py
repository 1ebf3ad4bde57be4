"""Reflection and exploration: the explorer (any Policy) reads signal-annotated trajectories,
writes a short exploration context, then plays goal-free exploration episodes under it.

The prompts are files next to this module (`prompts/*.txt`, shown in the README). The
explorer's answers are parsed leniently; an answer with nothing usable costs only that
exploration (counted as `malformed`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Protocol, TypeVar

from coevo.envs.base import Env
from coevo.envs.evolve import exploration_task
from coevo.envs.pool import EnvPool
from coevo.methods.agent_data.signals import KINDS, Found, Signal
from coevo.policy.base import Policy, Sampling
from coevo.render import RenderError, render_prompt
from coevo.rollout import rollout
from coevo.seeds import derive
from coevo.trajectory import Task, Trajectory, Turn

MAX_CONTEXT_CHARS = 300
"""A longer context is cut: it becomes the exploration episode's instruction."""
MAX_EPISODE_CHARS = 1500
"""Each trajectory shown to the reflection, cut to this (its start and its end kept)."""
EPISODES_SHOWN = 2
_DESCRIBE = {
    "forgetting": "the agent used to solve this task and now fails it",
    "boundary": "the agent's attempts at this task both succeed and fail",
    "rare": "the agent rarely takes the action '{pattern}' ({share:.1%} of episodes)",
}


@cache
def prompt(name: str) -> str:
    """A prompt template of the package (`reflect`, `explore`, `random`)."""
    return (resources.files(__package__) / "prompts" / f"{name}.txt").read_text("utf-8")


@dataclass(frozen=True)
class Seed:
    """One exploration to run: the task it starts from and the signal that chose it (None:
    signal-free, random exploration)."""

    task: Task
    signal: Found | None
    key: str
    """Unique within the run: names the exploration episode's task."""


class Kinded(Protocol):
    kind: str

    @property
    def task_id(self) -> str: ...


K = TypeVar("K", bound=Kinded)


def pick(signals: Sequence[K], n: int) -> list[K]:
    """Up to `n` signals, one per task, taking the kinds in turn (so one kind cannot crowd
    out the others), each kind's signals in the order found."""
    queues = {k: [s for s in signals if s.kind == k] for k in KINDS}
    chosen: list[K] = []
    tasks: set[str] = set()
    while len(chosen) < n and any(queues.values()):
        for kind in KINDS:
            while queues[kind]:
                s = queues[kind].pop(0)
                if s.task_id not in tasks:
                    chosen.append(s)
                    tasks.add(s.task_id)
                    break
            if len(chosen) >= n:
                break
    return chosen


def random_seeds(tasks: Sequence[Task], n: int, seed: int, prefix: str) -> list[Seed]:
    """The signal-free ablation: `n` train tasks drawn at random."""
    drawn = random.Random(seed).sample(list(tasks), min(n, len(tasks)))
    return [Seed(t, None, f"{prefix}-{i}") for i, t in enumerate(drawn)]


def episode_text(t: Trajectory, limit: int = MAX_EPISODE_CHARS) -> str:
    """A trajectory as the reflection reads it: its turns after the opening, and its reward."""
    body = "\n".join(
        (turn.text if turn.role == "assistant" else turn.text.strip()) for turn in t.turns[1:]
    )
    if len(body) > limit:
        body = body[: limit // 2] + "\n[...]\n" + body[-limit // 2 :]
    return f"{body}\nReward: {t.reward:.2f}"


def describe(signal: Signal) -> str:
    return _DESCRIBE[signal.kind].format(**{"pattern": "", "share": 0.0, **signal.detail})


def reflection_prompt(signal: Signal, step: Sequence[Trajectory]) -> str:
    shown = [step[i] for i in signal.trajectories[:EPISODES_SHOWN]]
    episodes = "\n\n".join(f"Attempt {k + 1}:\n{episode_text(t)}" for k, t in enumerate(shown))
    return prompt("reflect").format(
        signal=describe(signal), instruction=signal.task.instruction, episodes=episodes
    )


def parse_context(text: str) -> str | None:
    """The exploration context in an explorer's answer: what follows `Context:` (or the whole
    answer without one), on one line, cut to MAX_CONTEXT_CHARS; None if nothing is left."""
    if not isinstance(text, str):
        return None
    head, sep, rest = text.partition("Context:")
    if not sep:
        head, sep, rest = text.partition("context:")
    body = rest if sep else head
    body = " ".join(body.split())
    if body.lower().startswith("thought:"):
        body = body[len("thought:") :].strip()
    return body[:MAX_CONTEXT_CHARS] or None


def reflect(
    policy: Policy, texts: Sequence[str], sampling: Sampling, *, seed: int, max_length: int
) -> list[str | None]:
    """The explorer's context for each reflection prompt (None: a malformed answer)."""
    if not texts:
        return []
    budget = max(1, min(max_length, policy.max_context) - sampling.max_new_tokens)
    prompts = [fitted(t, policy.tokenizer, budget) for t in texts]
    asked = [i for i, p in enumerate(prompts) if p is not None]
    seeds = [derive(seed, "reflect", i) for i in asked]
    done = policy.generate([prompts[i] for i in asked], sampling, seeds=seeds) if asked else []
    answers: list[str | None] = [None] * len(texts)  # a prompt that cannot fit: malformed
    for i, completion in zip(asked, done, strict=True):
        answers[i] = parse_context(completion.text)
    return answers


def fitted(text: str, tokenizer: Any, budget: int) -> list[int] | None:
    """The prompt ids of `text` as one user message, its middle cut until it fits in
    `budget` tokens (the task and the question at its ends are kept); None if it cannot."""
    for _ in range(16):  # each pass drops a third: 16 take 21,000 characters below 30
        try:
            return render_prompt([Turn("user", text)], tokenizer, max_length=budget)
        except RenderError:
            if len(text) < 200:
                return None
            cut = len(text) // 3
            middle = len(text) // 2
            text = text[: middle - cut // 2] + "\n[...]\n" + text[middle + cut // 2 :]
    return None


def instruction(context: str | None) -> str:
    """The exploration episode's instruction: the explore prompt around the context."""
    return prompt("explore").format(context=context or prompt("random").strip()).strip()


def explore_env(
    policy: Policy,
    pool: EnvPool,
    env: Env,
    seeds: Sequence[Seed],
    contexts: Sequence[str | None],
    sampling: Sampling,
    *,
    seed: int,
    max_length: int,
    cut_block: int = 0,
    batch_size: int = 32,
) -> list[Trajectory]:
    """One goal-free exploration episode per seed, under its context, played by `policy`."""
    tasks = [
        exploration_task(env, s.task, instruction(c), s.key)
        for s, c in zip(seeds, contexts, strict=True)
    ]
    if not tasks:
        return []
    return rollout(
        policy,
        pool,
        tasks,
        sampling=sampling,
        batch_size=batch_size,
        seed=seed,
        agent="explorer",
        max_length=max_length,
        cut_block=cut_block,
        progress=False,
    )
