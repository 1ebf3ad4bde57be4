"""Run one recipe in a run directory: set up the pipeline, store and envs, call the method.

A rerun with the same directory and recipe skips every finished stage and resumes the one a
kill cut off; a different recipe in the same directory is refused. The recipe is checked
(coevo.methods.preflight) before the directory is made, so a bad one leaves nothing behind.
What is saved as `config.yaml`, and hashed to recognise the run, is the recipe as its method
reads it (`recorded`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from rich.markup import escape

from coevo.config import ConfigError, merge, to_dict, upgrade
from coevo.envs.base import make
from coevo.envs.pool import EnvPool
from coevo.envs.workers import RayEnvPool
from coevo.methods.grpo import TRAINER_DIR, intervals
from coevo.methods.plan import Scope, announce, pending
from coevo.methods.preflight import check_recipe
from coevo.methods.registry import OPTIONAL, method
from coevo.run.console import console
from coevo.run.context import Run
from coevo.run.estimate import Planned, time_left
from coevo.run.lock import lock_run_dir
from coevo.run.pipeline import (
    Pipeline,
    RunDirError,
    Stopped,
    continues,
    result_settings,
    write_atomic,
)
from coevo.run.processes import start
from coevo.run.recipe import GRPO_METHODS, RunConfig
from coevo.store import Store, StoreError
from coevo.train.loop import CHECKPOINTS, incomplete, is_weights_only

# Stages every method begins with, identical when env, model, sft and seed agree.
SHARED_STAGES = ("experts", "experts-valid", "model", "sft-target", "eval-0")
SHARED_KEYS = ("env", "model", "sft", "seed", "eval")
# The target's first exploration plays the SFT policy too, with the explore section's settings
# and seeds: ETO and the failure-agent methods (those with DPO phases) play the same episodes
# there, so one of them takes it from a source that explored with the same settings.
FIRST_EXPLORATION = "explore-1-target"
EXPLORATION_KEYS = ("explore", "analysis")  # analysis: the hard-negative threshold of its record
# Keys that only add stages after the finished ones when they grow: a finished run continues
# with more of them (`extending`).
EXTENDING = ("iterations", "rft.rounds")


def extending(config: RunConfig) -> tuple[str, ...]:
    """The keys that may grow to extend a finished run: EXTENDING, and `grpo.steps` where
    GRPO's learning rate does not depend on the number of steps (a constant schedule without
    warm-up), so the steps already trained had the rates a longer run would have given them."""
    optim = config.grpo.optim
    if optim.schedule == "constant" and optim.warmup_ratio == 0:
        return (*EXTENDING, "grpo.steps")
    return EXTENDING


def recorded(config: RunConfig) -> dict[str, Any]:
    """The recipe as its method reads it: without the keys only other methods read, without
    `server` unless the model is played through one, and without `rollout` (where the envs
    run changes no episode)."""
    keep = set(method(config.method).reads)
    values = to_dict(config)
    dropped = ["rollout", *(key for key in OPTIONAL if key not in keep)]
    if config.model.backend != "server":
        dropped.append("server")
    return {k: v for k, v in values.items() if k not in dropped}


def execute(
    config: RunConfig, out: str | Path, *, quiet: bool = False, until: Sequence[str] = ()
) -> Path:
    """Run (or finish) `config` in `out`; returns the run directory. `until`: stages of the
    run after which it stops, once all are finished (a rerun without it goes on from there)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunDirError(
            f"--out {str(out)!r} is a file, not a directory: give a new directory for the run "
            "(or a run's directory to resume it)."
        )
    chosen = method(config.method)
    check_recipe(config)
    threads = config.model.threads()
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    processes = start()
    if processes.count > 1 and config.method in GRPO_METHODS:
        raise ConfigError(
            f"method {config.method} does not run under accelerate launch yet (its rollouts "
            "happen inside GRPO training); run it as one process."
        )
    # Before anything is written: a second run on `out` is refused, not interleaved. Under
    # accelerate launch only the main process writes (coevo.run.processes), and holds it.
    with lock_run_dir(out) if processes.main else nullcontext():
        record = recorded(config)
        if processes.main:
            pipeline = Pipeline(
                out,
                record,
                quiet=quiet,
                extends=extending(config),
                defaults=to_dict(RunConfig()),
                recipe=RunConfig,
                scratch=(CHECKPOINTS,),  # GRPO's trainer folder is no stage: it keeps them
            )
            (out / "config.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
            try:
                store = Store(out, label=config.label)
            except StoreError as exc:  # a damaged store makes the directory unusable as it is
                raise RunDirError(str(exc)) from None
            if config.init_from:
                adopt(Path(config.init_from), config, pipeline, store)
        processes.barrier("the run directory's set-up")
        if not processes.main:  # the run's files are there now: read, never written, here
            pipeline = Pipeline(
                out, record, quiet=True, defaults=to_dict(RunConfig()), recipe=RunConfig
            )
            store = Store(out, readonly=True)
        # A finished stage whose trajectories are not in the store (moved aside) runs again.
        pipeline.rows = store.stage_rows
        pool = env_pool(config)
        try:
            run = Run(config, pipeline, store, pool, processes)
            if until:
                pipeline.until = stop_after(run, chosen.plan, until)
            if processes.main and not quiet:
                say_plan(run, partial(up_to, chosen.plan, pipeline.until))
            try:
                chosen.loop(run)
            except Stopped:
                if processes.main and not quiet:
                    console.print(
                        escape(f"{pipeline.name}: stopped after {', '.join(until)}, as asked"),
                        soft_wrap=True,
                    )
        except StoreError as exc:  # damage found mid-run: the same sentence, not a traceback
            raise RunDirError(str(exc)) from None
        finally:
            pool.close()
            store.close()
    processes.end()
    return out


def stop_after(
    run: Run, plan: Callable[[Scope], list[Planned]], until: Sequence[str]
) -> tuple[str, ...]:
    """`until`, checked against the run's stages: a name that is not one is refused, with
    the stages it has (a misspelt one would let the run go on to its end)."""
    stages = [p.name for p in plan(Scope(run))]
    unknown = [name for name in until if name not in stages]
    if unknown:
        raise ConfigError(
            f"until: {', '.join(unknown)} is not a stage of this run; its stages: "
            f"{', '.join(stages)}."
        )
    return tuple(until)


def up_to(
    plan: Callable[[Scope], list[Planned]], until: tuple[str, ...], scope: Scope
) -> list[Planned]:
    """`plan`'s stages, up to the last of `until` (all of them without it)."""
    planned = plan(scope)
    if not until:
        return planned
    last = max(i for i, p in enumerate(planned) if p.name in until)
    return planned[: last + 1]


def say_plan(run: Run, plan: Callable[[Scope], list[Planned]]) -> None:
    """Print the stages the run has still to run, with their sizes (`coevo.methods.plan`),
    and after each stage it runs the time the rest should take (`coevo.run.estimate`)."""
    scope = Scope(run)
    for line in announce(scope, plan(scope)):
        console.print(escape(line), soft_wrap=True, highlight=False)

    def finished(_: str) -> None:
        line = time_left(run.pipeline.name, run.dir, pending(scope, plan(scope)))
        if line is not None:
            console.print(f"[dim]{escape(line)}[/]", soft_wrap=True)

    run.pipeline.finished = finished


def env_pool(config: RunConfig) -> EnvPool | RayEnvPool:
    """The run's envs: in this process, or in `rollout.workers` Ray worker processes."""
    env, rollout = config.env, config.rollout
    factory = partial(make, env.name, **env.options)  # sent to the workers: no lambda
    if rollout.workers:
        return RayEnvPool(factory, rollout.workers, address=rollout.ray_address)
    return EnvPool(factory)


def adoptable(source: Path, config: RunConfig) -> tuple[list[str], list[str]]:
    """(the shared settings in which run `source` differs from `config`, the stages `config`'s
    run would adopt from it). Only a source's finished stages are adopted (`adopt`); all of
    them when `config` is the source's recipe or extends it (more iterations or RFT rounds:
    a branch that goes on from it, the source left as it is), for a method outside GRPO."""
    source_config = source / "config.yaml"
    if not source_config.is_file():
        raise ConfigError(f"init_from: {str(source)!r} is not a run directory (no config.yaml).")
    # A key that an earlier coevo did not write has its default (as when a run resumes).
    saved = upgrade(yaml.safe_load(source_config.read_text()), RunConfig)
    defaults = to_dict(RunConfig())
    if config.method not in GRPO_METHODS and continues(
        saved, recorded(config), extending(config), defaults
    ):
        # A branch: the same recipe, or one that extends it; every finished stage is shared.
        done = sorted(p.parent.name for p in (source / "stages").glob("*/manifest.json"))
        return [], done
    theirs = merge(defaults, saved)
    ours = to_dict(config)

    def alike(section: str) -> bool:  # settings that change only time and memory aside
        return result_settings(theirs, section) == result_settings(ours, section)

    differ = [k for k in SHARED_KEYS if not alike(k)]
    stages = list(SHARED_STAGES)
    explores_alike = all(alike(k) for k in EXPLORATION_KEYS)
    if "dpo" in method(config.method).reads and explores_alike:
        stages.append(FIRST_EXPLORATION)
    if config.method in GRPO_METHODS and theirs.get("method") in GRPO_METHODS and alike("grpo"):
        stages += grpo_prefix(source, config)
    return differ, stages


def alike_intervals(config: RunConfig) -> list[int]:
    """The ends of the GRPO intervals that `config`'s run plays as every GRPO run with its
    settings does: all of `grpo`'s; `agent_data`'s up to its first round (the steps after it
    draw tasks the round synthesized)."""
    grpo = config.grpo
    ends = intervals(grpo.steps, grpo.eval_every)
    if config.method != "agent_data":
        return ends
    every = config.agent_data.synthesis_every
    return sorted(end for end in {*ends, *intervals(grpo.steps, every)} if end <= every)


def grpo_prefix(source: Path, config: RunConfig) -> list[str]:
    """The GRPO intervals (`grpo-<i>`) and their evaluations (`eval-<i>`) that `config`'s run
    would adopt from the finished ones of GRPO run `source`, whose settings it shares: those
    that end where its own do, trained on no synthesized task, up to the last whose end the
    source's trainer kept a checkpoint of (`Checkpoints.keep_stage_ends`), from which the run
    trains on."""
    adopted: list[str] = []
    stages: list[str] = []
    done = 0
    for i, until in enumerate(alike_intervals(config), start=1):
        manifest = _manifest(source / "stages" / f"grpo-{i}")
        inputs = (manifest or {}).get("inputs") or {}
        if inputs.get("steps") != [done + 1, until] or inputs.get("synthesized_tasks"):
            break
        stages.append(f"grpo-{i}")
        evaluated = until % config.grpo.eval_every == 0 or until == config.grpo.steps
        if evaluated and _manifest(source / "stages" / f"eval-{i}") is not None:
            stages.append(f"eval-{i}")
        if resumable(trainer_checkpoint(source, until)):
            adopted = list(stages)
        done = until
    return adopted


def trainer_checkpoint(run_dir: Path, step: int) -> Path:
    return run_dir / "stages" / TRAINER_DIR / CHECKPOINTS / f"step-{step}"


def resumable(path: Path) -> bool:
    """Whether training can go on from checkpoint `path`: complete, with the optimizer's state."""
    return path.is_dir() and incomplete(path) is None and not is_weights_only(path)


def _manifest(stage_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((stage_dir / "manifest.json").read_text())
    except (OSError, ValueError):  # none, or not readable: the stage is not finished
        return None


def adopt(source: Path, config: RunConfig, pipeline: Pipeline, store: Store) -> None:
    """Start from `source`'s shared stages: link their files and copy their stored rows (and
    the target's first exploration, where both runs explore with the same settings; and the
    GRPO intervals both play alike, with the trainer's folder at the last one's end). A DPO
    stage's pairs stay in the source's store: nothing after the stage reads them."""
    differ, stages = adoptable(source, config)
    if differ:
        raise ConfigError(
            f"init_from: {str(source)!r} was run with other {', '.join(differ)} settings; "
            "its SFT policy is not this run's starting point."
        )
    trained = [s for s in stages if s.startswith("grpo-")]
    if trained and not adopt_trainer(source, pipeline.run_dir, trained[-1]):
        stages = [s for s in stages if s in SHARED_STAGES or s == FIRST_EXPLORATION]
    source_store = Store(source, create=False)
    try:
        for stage in stages:
            manifest = source / "stages" / stage / "manifest.json"
            if pipeline.done(stage) or not manifest.is_file():
                continue
            target = pipeline.run_dir / "stages" / stage
            if target.exists():
                shutil.rmtree(target)
            # Checkpoints are not needed to start from a finished stage, only its outputs.
            shutil.copytree(
                source / "stages" / stage,
                target,
                ignore=shutil.ignore_patterns(CHECKPOINTS, "manifest.json"),
                copy_function=_link_or_copy,
            )
            # Rows are tagged with the stage (evals with the stage and split) and iteration
            # (a GRPO interval's with each step).
            for name in (stage, *(f"{stage}-{split}" for split in config.eval.splits)):
                by_iteration: dict[int, list[Any]] = {}
                for row in source_store.stored_trajectories(stage=name):
                    by_iteration.setdefault(row.iteration, []).append(row.trajectory)
                for iteration, played in sorted(by_iteration.items()):
                    store.add_trajectories(played, iteration=iteration, stage=name)
            # The manifest last: the stage counts as done only once everything is in place.
            adopted = {**json.loads(manifest.read_text()), "adopted_from": str(source)}
            write_atomic(target / "manifest.json", json.dumps(adopted, indent=2))
    finally:
        source_store.close()


ADOPTED = "adopted_from"


def adopt_trainer(source: Path, run_dir: Path, stage: str) -> bool:
    """Give the run the GRPO trainer's folder of `source` as it was at the end of its stage
    `stage`: the checkpoint there (linked) and the metrics of the steps up to it, so the run's
    next interval trains on from there. False (nothing adopted) when the run has a trainer
    folder of its own: it trained some steps itself before."""
    trainer = run_dir / "stages" / TRAINER_DIR
    if trainer.exists():
        return (trainer / ADOPTED).is_file()
    until = json.loads((source / "stages" / stage / "manifest.json").read_text())
    until = until["inputs"]["steps"][1]
    made = trainer.with_name(trainer.name + ".tmp")
    shutil.rmtree(made, ignore_errors=True)
    shutil.copytree(
        trainer_checkpoint(source, until),
        made / CHECKPOINTS / f"step-{until}",
        copy_function=_link_or_copy,
    )
    metrics = source / "stages" / TRAINER_DIR / "metrics.jsonl"
    lines = [line for line in metrics.read_text().splitlines() if line.strip()]
    kept = [line for line in lines if json.loads(line).get("step", 0) <= until]
    (made / "metrics.jsonl").write_text("".join(line + "\n" for line in kept))
    (made / ADOPTED).write_text(f"{source}\n")
    made.rename(trainer)  # whole or not at all
    return True


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
