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

Envs are reset and stepped a batch at a time through the pool (`reset_all`, `step_all`): one
after another in this process, or spread over Ray worker processes that step their shares in
parallel (`coevo.envs.workers`). An episode whose worker process died is played again from its
start, once (its seeds make it the same episode); lost a second time, it ends, marked
`worker_lost`, and the rollout goes on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coevo.envs.base import Env, StepResult
from coevo.envs.conversation import observation_message, opening_message
from coevo.envs.pool import EnvPool, WorkerLost
from coevo.envs.react import parse
from coevo.envs.workers import RayEnvPool
from coevo.policy.base import Completion, Policy, Sampling, SessionPolicy
from coevo.render import ContextTooLongError, Conversation, tokenize
from coevo.seeds import derive, episode_seed
from coevo.trajectory import Task, Trajectory, Turn


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
    prompts_cut: int = 0
    """Prompts the context budget left turns out of: replies sampled with less context."""
    format_errors: int = 0
    invalid_actions: int = 0
    retried: bool = False
    """Played again after its env worker died."""
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
    cut_block: int = 0,
    progress: bool = True,
    description: str = "rollout",
    cache: bool = True,
    on_finished: Callable[[list[Trajectory]], None] | None = None,
) -> list[Trajectory]:
    """Play `samples` episodes of every task with `policy`; trajectories in task order.

    `envs` is an `EnvPool` (kept open for the caller's next rollout) or a zero-argument env
    factory (a pool is made and closed here). `max_length` caps prompt + reply tokens
    (default: the policy's context); older exchanges are dropped to fit (`cut_block` tokens
    at a time where it is set, `Conversation.prompt`), and the episode's
    `prompts_cut_by_max_length` counts its replies sampled so. `cache` lets a
    policy that supports sessions keep each episode's key/value cache between steps.
    `on_finished` is called with the episodes each step ended, as they end (e.g. to store
    them, so that a kill loses only the episodes still in play).
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
    pool = envs if isinstance(envs, EnvPool | RayEnvPool) else EnvPool(envs)
    # (task, sample, result index, retried): an episode a dead env worker took is queued again
    # once, at the front, and replays the same way (its seeds depend on nothing else).
    queue = deque((task, k, i, False) for i, (task, k) in enumerate(_episodes(tasks, samples)))
    total = len(queue)
    results: list[Trajectory | None] = [None] * total
    live: list[_Episode] = []
    meta = {"policy": policy.name, "sampling": sampling.to_dict(), "rollout_seed": seed}
    bar = _Progress(description, total, enabled=progress)
    # A policy that keeps per-episode caches (HFPolicy) only runs each step's new tokens.
    sessions = policy if cache and isinstance(policy, SessionPolicy) else None
    token = object()  # session keys unique to this call, even when rollouts share a policy
    try:
        while queue or live:
            joining = [queue.popleft() for _ in range(min(len(queue), batch_size - len(live)))]
            started, lost = _start(pool, policy.tokenizer, joining, seed)
            live.extend(started)
            prompts, waiting, finished = [], [], []
            tokenize([ep.conversation for ep in live])  # every episode's new turns, one call
            for ep in live:
                try:
                    ids, dropped = ep.conversation.prompt(budget, cut_block)
                    prompts.append(ids)
                    ep.prompts_cut += dropped > 0
                    waiting.append(ep)
                except ContextTooLongError as exc:
                    ep.metadata["error"] = f"context: {exc}"
                    finished.append(ep)
            seeds = [derive(ep.seed, ep.steps) for ep in waiting]
            if not prompts:
                completions = []
            elif sessions is not None:
                keys = [(token, ep.index) for ep in waiting]
                completions = sessions.generate(prompts, sampling, seeds=seeds, sessions=keys)
            else:
                completions = policy.generate(prompts, sampling, seeds=seeds)
            for ep, completion in zip(waiting, completions, strict=True):
                ep.truncated_by_lengths += completion.finish_reason == "length"
                ep.conversation.append(_agent_turn(completion))
                ep.steps += 1
            outcomes = pool.step_all(
                [(ep.env, c.text) for ep, c in zip(waiting, completions, strict=True)]
            )
            for ep, completion, outcome in zip(waiting, completions, outcomes, strict=True):
                if isinstance(outcome, WorkerLost):
                    lost.append(ep)
                elif _advance(pool, ep, completion.text, outcome):
                    finished.append(ep)
            bar.steps(len(waiting))
            for ep in lost:  # its worker died: played again once, else ended and marked
                if ep.retried:
                    ep.metadata["worker_lost"] = "its env worker died twice"
                    finished.append(ep)
                else:
                    queue.appendleft((ep.task, ep.sample, ep.index, True))
            for ep in finished:
                results[ep.index] = _trajectory(ep, agent, meta)
                if not {"env_error", "worker_lost"} & ep.metadata.keys():
                    pool.release(ep.env)
                bar.done(results[ep.index].reward)
            if on_finished is not None and finished:
                on_finished([results[ep.index] for ep in finished])
            gone = {id(ep) for ep in finished + lost}
            live = [ep for ep in live if id(ep) not in gone]
            ended = [(token, ep.index) for ep in finished + lost]
            if sessions is not None and ended:
                sessions.end_sessions(ended)
    finally:
        bar.close()
        if sessions is not None:
            sessions.end_sessions([(token, ep.index) for ep in live])
        for ep in live:  # an exception mid-rollout: hand the envs back for the pool to close
            pool.release(ep.env)
        if pool is not envs:
            pool.close()
    return [t for t in results if t is not None]


def _episodes(tasks: Sequence[Task], samples: int) -> list[tuple[Task, int]]:
    return [(task, k) for task in tasks for k in range(samples)]


def _start(
    pool: EnvPool | RayEnvPool,
    tokenizer: Any,
    joining: list[tuple[Task, int, int, bool]],
    seed: int,
) -> tuple[list[_Episode], list[_Episode]]:
    """Reset an env for each joining episode, all at once: (started, lost with a worker)."""
    if not joining:
        return [], []
    envs = [pool.acquire() for _ in joining]
    seeds = [episode_seed(seed, task.id, k) for task, k, _, _ in joining]
    calls = [(env, j[0], s) for env, j, s in zip(envs, joining, seeds, strict=True)]
    outcomes = pool.reset_all(calls)
    started, lost = [], []
    failed: BaseException | None = None
    for env, (task, k, index, retried), ep_seed, outcome in zip(
        envs, joining, seeds, outcomes, strict=True
    ):
        conversation = Conversation(tokenizer)
        ep = _Episode(index, task, k, ep_seed, env, conversation, retried=retried)
        if isinstance(outcome, WorkerLost):
            lost.append(ep)
        elif isinstance(outcome, BaseException):
            pool.discard(env)
            failed = failed or outcome
        else:
            conversation.append(Turn("user", opening_message(env, outcome[0])))
            started.append(ep)
    if failed is not None:  # a reset that raises is a broken env or task: the rollout stops
        for ep in started:
            pool.release(ep.env)
        raise failed
    return started, lost


def _agent_turn(completion: Completion) -> Turn:
    """The reply as a turn, with the ids the policy sampled and their log-probs when it gave
    them: the conversation then continues from exactly those ids (see `coevo.render`)."""
    ids = completion.token_ids
    logprobs = completion.logprobs
    if ids is None:
        return Turn("assistant", completion.text)
    if logprobs is not None and len(logprobs) != len(ids):
        # Dropping them would silently turn a sampled turn into text to re-tokenise.
        raise ValueError(
            f"The policy returned {len(ids)} token ids but {len(logprobs)} log-probs for one "
            "reply; a policy must give one log-prob per sampled token."
        )
    return Turn("assistant", completion.text, token_ids=ids, logprobs=logprobs)


def _advance(pool: EnvPool | RayEnvPool, ep: _Episode, reply: str, outcome: Any) -> bool:
    """Record the env's answer to the reply; True when the episode is over."""
    if isinstance(outcome, BaseException):  # a crashed env ends this episode only
        ep.metadata["env_error"] = f"{type(outcome).__name__}: {outcome}"
        pool.discard(ep.env)
        return True
    ep.last = outcome
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
            "prompts_cut_by_max_length": ep.prompts_cut,
            "format_errors": ep.format_errors,
            "invalid_actions": ep.invalid_actions,
            "info": last.info if last is not None else {},
            "final_observation": last.observation if last is not None else "",
            **ep.metadata,
        },
    )


class _Progress:
    """A rich bar: episodes done, mean reward, generation steps per second, time elapsed and
    the time left at the rate episodes have ended so far."""

    def __init__(self, description: str, total: int, *, enabled: bool) -> None:
        self.enabled = enabled and total > 0
        self.rewards: list[float] = []
        self.n_steps = 0
        self.start = time.perf_counter()
        if not self.enabled:
            return
        from coevo.progress import bar

        # Its time left comes from the episodes ended so far: shown once one has.
        self.progress = bar(
            "episodes, mean reward {task.fields[reward]},", "{task.fields[rate]} steps/s"
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
