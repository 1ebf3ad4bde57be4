"""The stages that play episodes: exploration (`explore-<iteration>-<agent>`) and evaluation
(`eval-<iteration>`, greedy by default), and the one constructor of the policies they, GRPO and
the agent-data explorer play with (`open_policy`).

Trajectories go to the run's store, tagged with iteration, stage and agent; later stages read
them back from there. Both stages resume after a kill from what they committed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from coevo.analysis.outcomes import episode_stats, outcome_shares
from coevo.policy.base import Policy
from coevo.rollout import rollout
from coevo.run.context import Run, StageModel
from coevo.run.recipe import ServerSection
from coevo.run.records import EvalRecord, ExploreRecord
from coevo.seeds import derive
from coevo.trajectory import Task, Trajectory


def open_policy(
    path: str | Path,
    *,
    name: str,
    module: Any = None,
    dtype: str | Any = "auto",
    device: str = "cpu",
    decode: str = "auto",
    server: ServerSection | None = None,
    served_model: str | None = None,
) -> Policy:
    """The one place a policy is built: the checkpoint at `path` in-process (`module`: the
    model itself when it is still in memory), or, when `server.url` is set, that
    OpenAI-compatible server with `path`'s tokenizer, serving `served_model` (default
    `server.model`) under the server section's key, timeout and concurrency."""
    if server is not None and server.url is not None:
        from coevo.policy.server import ServerPolicy

        return ServerPolicy(
            server.url,
            served_model or str(server.model),
            tokenizer=path,
            name=name,
            api_key=os.environ.get(server.api_key_env) if server.api_key_env else None,
            max_context=server.max_context,
            timeout=server.timeout,
            max_concurrency=server.max_concurrency,
        )
    from coevo.policy.hf import HFPolicy

    return HFPolicy(path, model=module, dtype=dtype, device=device, name=name, decode=decode)


def policy(run: Run, model: StageModel, name: str) -> Policy:
    """What plays `model` as agent `name`, as `model.backend` says: the checkpoint in-process
    (the module itself when it is still in memory), or the recipe's generation server, made to
    serve `model` first (`coevo.run.serving`)."""
    cfg = run.config.model
    if cfg.backend == "server":
        from coevo.run.serving import served_name

        server = run.config.server
        # The server made to serve this model first.
        served = served_name(server, model.path, main=run.processes.main)
        return open_policy(model.path, name=name, server=server, served_model=served)
    device = run.processes.device(cfg.device)  # under accelerate launch: this process's GPU
    return open_policy(
        model.path,
        name=name,
        module=model.module,
        dtype=cfg.dtype,
        device=device,
        decode=cfg.decode,
    )


def explore(
    run: Run,
    model: StageModel,
    agent: str,
    iteration: int,
    tasks: list[Task],
    *,
    samples: int | None = None,
    stage_name: str | None = None,
) -> list[Trajectory]:
    """Sampled rollouts of `agent` on `tasks` (stage `explore-<iteration>-<agent>`).

    Episodes are stored as they end (`play_and_store`); after a kill the stage reruns and
    plays only the (task, sample) episodes the store does not hold.
    """
    cfg = run.config.explore
    samples = samples or cfg.samples
    name = stage_name or f"explore-{iteration}-{agent}"
    sampling = cfg.sampling.sampling()
    seed = derive(run.config.seed, "explore", iteration)

    def stage(_: Path) -> ExploreRecord:
        done = {(t.task.id, t.sample) for t in run.store.trajectories(stage=name)}
        todo = [task for task in tasks if any((task.id, k) not in done for k in range(samples))]
        if todo:
            agent_policy = policy(run, model, agent)
            for start in range(0, len(todo), cfg.chunk):
                chunk = todo[start : start + cfg.chunk]
                play_and_store(
                    run,
                    agent_policy,
                    chunk,
                    done,
                    stage=name,
                    iteration=iteration,
                    sampling=sampling,
                    samples=samples,
                    batch_size=cfg.batch_size,
                    seed=seed,
                    agent=agent,
                    description=f"{name}, tasks {start + 1}-{start + len(chunk)} of {len(todo)}",
                )
        played = run.store.trajectories(stage=name)
        stats = episode_stats(played)
        threshold = run.config.analysis.hard_negative_threshold
        return ExploreRecord(
            iteration=iteration,
            episodes=len(played),
            mean_reward=stats.reward,
            stats={agent: stats},
            outcomes={agent: outcome_shares([t.reward for t in played], threshold)},
        )

    inputs = {
        "model": str(model.path),
        "tasks": len(tasks),
        "samples": samples,
        "sampling": sampling.to_dict(),
        "seed": seed,
    }
    run.stage(name, stage, ExploreRecord.from_dict, inputs, everyone=True)
    return run.store.trajectories(stage=name)


def evaluate(run: Run, model: StageModel, iteration: int) -> EvalRecord:
    """Rollouts of the target on the evaluated splits (stage `eval-<iteration>`), sampled as
    `eval.sampling` says: greedy unless a recipe says otherwise."""
    cfg = run.config.eval
    sampling = cfg.sampling.sampling()

    def stage(_: Path) -> EvalRecord:
        target = policy(run, model, "target")
        splits = {}
        for split in cfg.splits:
            name = f"eval-{iteration}-{split}"
            # Episodes stored before a kill are read back rather than played again.
            done = {(t.task.id, t.sample) for t in run.store.trajectories(stage=name)}
            todo = [task for task in run.tasks(split) if (task.id, 0) not in done]
            if todo:
                play_and_store(
                    run,
                    target,
                    todo,
                    done,
                    stage=name,
                    iteration=iteration,
                    sampling=sampling,
                    batch_size=cfg.batch_size,
                    seed=run.config.seed,
                    agent="target",
                    description=f"eval-{iteration} {split}",
                )
            splits[split] = episode_stats(run.store.trajectories(stage=name))
        return EvalRecord(iteration, splits)

    inputs = {"model": str(model.path), "sampling": sampling.to_dict()}
    return run.stage(f"eval-{iteration}", stage, EvalRecord.from_dict, inputs, everyone=True)


def play_and_store(
    run: Run,
    policy: Policy,
    tasks: list[Task],
    done: set[tuple[str, int]],
    *,
    stage: str,
    iteration: int,
    **settings: Any,
) -> None:
    """Play `tasks` (`play`) and store under `stage` the episodes whose (task id, sample) is
    not in `done`. One process stores each step's ended episodes as they end, each step's in
    one transaction, so a kill loses only the episodes still in play; under accelerate launch
    the main process stores them all once every process's share is back."""

    def store(played: list[Trajectory]) -> None:
        fresh = [t for t in played if (t.task.id, t.sample) not in done]
        if fresh:
            run.store.add_trajectories(fresh, iteration=iteration, stage=stage)
            done.update((t.task.id, t.sample) for t in fresh)

    if run.processes.count == 1:
        play(run, policy, tasks, on_finished=store, **settings)
        return
    played = play(run, policy, tasks, **settings)
    if run.processes.main:
        store(played)


def play(run: Run, policy: Policy, tasks: list[Task], **settings: Any) -> list[Trajectory]:
    """`rollout` of `tasks` within the run's context budget (`model.max_length`, cut in
    `model.cut_block`s); under accelerate launch each process plays its share and every
    process gets all the episodes back, in task order (as one process would have played)."""
    procs = run.processes
    budget = {"max_length": run.config.model.max_length, "cut_block": run.config.model.cut_block}
    played = rollout(policy, run.pool, procs.share(tasks), **budget, **settings)
    if procs.count == 1:
        return played
    order = {task.id: i for i, task in enumerate(tasks)}
    return sorted(procs.gather(played), key=lambda t: (order[t.task.id], t.sample))
