"""Lockstep rollouts: many (task, sample) episodes advance together, one batched generate a step.

Each round, every live episode gets its next reply from one `policy.generate` call over the
whole batch, then each env steps. Finished episodes leave and queued ones join at once
(continuous batching up to `batch_size`), so the batch stays full until the queue runs dry.

Prompts come from a `Conversation` per episode holding exactly the turns the Trajectory stores
(`opening_message`, agent replies, `observation_message`), so generation and training see the
same text; each round only the new turns are rendered and tokenised, and a policy with
sessions (a `SessionPolicy`, such as HFPolicy) keeps each episode's key/value cache, so the model only runs on the new
tokens rather than the whole conversation again. Every episode has its own seed (from the
rollout seed, the task id and the sample index) and every generation step its own derived
seed, so a sampled episode does not depend on which others share its batch.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coevo.envs.base import Env, StepResult
from coevo.envs.episode import observation_message, opening_message
from coevo.envs.pool import EnvPool
from coevo.envs.react import parse
from coevo.policy.base import Completion, Policy, Sampling, SessionPolicy
from coevo.render import ContextTooLongError, Conversation
from coevo.trajectory import Task, Trajectory, Turn


def episode_seed(seed: int, task_id: str, sample: int) -> int:
    """A stable 63-bit seed for one (task, sample) episode of a rollout seeded `seed`."""
    digest = hashlib.blake2b(f"{seed}|{task_id}|{sample}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7_919) % (1 << 63)


@dataclass
class _Episode:
    """A live episode: its env, its conversation so far and how it stands."""

    index: int
    task: Task
    sample: int
    seed: int
    env: Env
    conversation: Conversation
    steps: int = 0
    last: StepResult | None = None
    truncated_by_lengths: int = 0
    format_errors: int = 0
    invalid_actions: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


def rollout(
    policy: Policy,
    envs: EnvPool | Callable[[], Env],
    tasks: Sequence[Task],
    *,
    sampling: Sampling | None = None,
    samples: int = 1,
    batch_size: int = 32,
    seed: int = 0,
    agent: str | None = None,
    max_length: int | None = None,
    progress: bool = True,
    description: str = "rollout",
    cache: bool = True,
) -> list[Trajectory]:
    """Play `samples` episodes of every task with `policy`; trajectories in task order.

    `envs` is an `EnvPool` (kept open for the caller's next rollout) or a zero-argument env
    factory (a pool is made and closed here). `max_length` caps prompt + reply tokens
    (default: the policy's context); older exchanges are dropped to fit. `cache` lets a
    policy that supports sessions keep each episode's key/value cache between steps.
    """
    if samples < 1 or batch_size < 1:
        raise ValueError(f"samples and batch_size must be at least 1, got {samples}, {batch_size}.")
    sampling = sampling or Sampling()
    agent = agent or policy.name
    limit = min(max_length or policy.max_context, policy.max_context)
    budget = limit - sampling.max_new_tokens
    if budget < 1:
        raise ValueError(
            f"max_new_tokens={sampling.max_new_tokens} leaves no room for a prompt in a "
            f"context of {limit} tokens: lower max_new_tokens or raise max_length."
        )
    pool = envs if isinstance(envs, EnvPool) else EnvPool(envs)
    queue = deque((task, k) for task in tasks for k in range(samples))
    total = len(queue)
    results: list[Trajectory | None] = [None] * total
    live: list[_Episode] = []
    meta = {"policy": policy.name, "sampling": sampling.to_dict(), "rollout_seed": seed}
    bar = _Progress(description, total, enabled=progress)
    # A policy that keeps per-episode caches (HFPolicy) only runs each step's new tokens.
    sessions = policy if cache and isinstance(policy, SessionPolicy) else None
    token = object()  # session keys unique to this call, even when rollouts share a policy
    try:
        next_index = 0
        while queue or live:
            while queue and len(live) < batch_size:
                task, k = queue.popleft()
                live.append(_start(pool, policy.tokenizer, task, k, next_index, seed))
                next_index += 1
            prompts, waiting, finished = [], [], []
            for ep in live:
                try:
                    prompts.append(ep.conversation.prompt_ids(budget))
                    waiting.append(ep)
                except ContextTooLongError as exc:
                    ep.metadata["error"] = f"context: {exc}"
                    finished.append(ep)
            seeds = [step_seed(ep.seed, ep.steps) for ep in waiting]
            if not prompts:
                completions = []
            elif sessions is not None:
                keys = [(token, ep.index) for ep in waiting]
                completions = sessions.generate(prompts, sampling, seeds=seeds, sessions=keys)
            else:
                completions = policy.generate(prompts, sampling, seeds=seeds)
            for ep, completion in zip(waiting, completions, strict=True):
                ep.truncated_by_lengths += completion.finish_reason == "length"
                if _advance(pool, ep, completion):
                    finished.append(ep)
            bar.steps(len(waiting))
            for ep in finished:
                results[ep.index] = _trajectory(ep, agent, meta)
                if "env_error" not in ep.metadata:
                    pool.release(ep.env)
                bar.done(results[ep.index].reward)
            gone = {id(ep) for ep in finished}
            live = [ep for ep in live if id(ep) not in gone]
            if sessions is not None and finished:
                sessions.end_sessions([(token, ep.index) for ep in finished])
    finally:
        bar.close()
        if sessions is not None:
            sessions.end_sessions([(token, ep.index) for ep in live])
        for ep in live:  # an exception mid-rollout: hand the envs back for the pool to close
            pool.release(ep.env)
        if pool is not envs:
            pool.close()
    return [t for t in results if t is not None]


def _start(
    pool: EnvPool, tokenizer: Any, task: Task, sample: int, index: int, seed: int
) -> _Episode:
    env = pool.acquire()
    ep_seed = episode_seed(seed, task.id, sample)
    try:
        observation, _ = env.reset(task, seed=ep_seed)
    except Exception:
        pool.discard(env)
        raise
    conversation = Conversation(tokenizer)
    conversation.append(Turn("user", opening_message(env, observation)))
    return _Episode(index, task, sample, ep_seed, env, conversation)


def _agent_turn(completion: Completion) -> Turn:
    """The reply as a turn, with the ids the policy sampled and their log-probs when it gave
    them: the conversation then continues from exactly those ids (see `coevo.render`)."""
    ids = completion.token_ids
    logprobs = completion.logprobs
    if ids is None or (logprobs is not None and len(logprobs) != len(ids)):
        return Turn("assistant", completion.text)
    return Turn("assistant", completion.text, token_ids=ids, logprobs=logprobs)


def _advance(pool: EnvPool, ep: _Episode, completion: Completion) -> bool:
    """Step the env with the reply and record both turns; True when the episode is over."""
    reply = completion.text
    ep.conversation.append(_agent_turn(completion))
    ep.steps += 1
    try:
        ep.last = ep.env.step(reply)
    except Exception as exc:  # a crashed env ends this episode only; the env is not reused
        ep.metadata["env_error"] = f"{type(exc).__name__}: {exc}"
        pool.discard(ep.env)
        return True
    # A reply with no parsable action is a format error; an action the env could not carry
    # out (a label not on the page, an SQL error, an unknown command) is an invalid action.
    if not parse(reply).ok:
        ep.format_errors += 1
    elif ep.last.info.get("error"):
        ep.invalid_actions += 1
    if ep.last.done:
        return True
    ep.conversation.append(Turn("user", observation_message(ep.last.observation)))
    return False


def _trajectory(ep: _Episode, agent: str, meta: dict[str, Any]) -> Trajectory:
    last = ep.last
    ended_by_env = last is not None and last.done
    return Trajectory(
        task=ep.task,
        agent=agent,
        turns=tuple(ep.conversation.turns),
        reward=float(last.reward) if ended_by_env else 0.0,
        terminated=bool(last.terminated) if ended_by_env else False,
        # Cut short by the context or a crashed env counts as truncated: the task did not end.
        truncated=bool(last.truncated) if ended_by_env else True,
        steps=ep.steps,
        sample=ep.sample,
        metadata={
            **meta,
            "seed": ep.seed,
            "replies_cut_by_max_new_tokens": ep.truncated_by_lengths,
            "format_errors": ep.format_errors,
            "invalid_actions": ep.invalid_actions,
            "info": last.info if last is not None else {},
            "final_observation": last.observation if last is not None else "",
            **ep.metadata,
        },
    )


class _Progress:
    """A rich bar: episodes done, mean reward, generation steps per second."""

    def __init__(self, description: str, total: int, *, enabled: bool) -> None:
        self.enabled = enabled and total > 0
        self.rewards: list[float] = []
        self.n_steps = 0
        self.start = time.perf_counter()
        if not self.enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("episodes, mean reward {task.fields[reward]},"),
            TextColumn("{task.fields[rate]} steps/s"),
            TimeElapsedColumn(),
        )
        self.task = self.progress.add_task(description, total=total, reward="-", rate="-")
        self.progress.start()

    def steps(self, n: int) -> None:
        self.n_steps += n
        self._refresh(0)

    def done(self, reward: float) -> None:
        self.rewards.append(reward)
        self._refresh(1)

    def _refresh(self, advance: int) -> None:
        if not self.enabled:
            return
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")
        self.progress.update(
            self.task,
            advance=advance,
            reward="-" if not self.rewards else f"{mean:.3f}",
            rate=f"{self.n_steps / elapsed:.1f}",
        )

    def close(self) -> None:
        if self.enabled:
            self.progress.stop()
