"""Where every method starts: the expert demonstrations, the base model, the target's SFT.

`shared_start` is the first four stages of every method (experts, model, sft-target, eval-0),
the ones `init_from` adopts from another run so compared methods share one SFT policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from coevo.envs.base import EnvError
from coevo.envs.conversation import expert_trajectory
from coevo.run.console import console
from coevo.run.context import VALID, Run, StageModel
from coevo.run.records import ExpertsRecord, ModelRecord, SftRecord
from coevo.seeds import trainer_seed
from coevo.stages import play, training
from coevo.trajectory import Trajectory


@dataclass(frozen=True)
class SharedStart:
    """What the shared stages give a method."""

    experts: dict[str, Trajectory]
    """The expert demonstration of each train task that has one, by task id."""
    base: StageModel
    """The model before any fine-tuning."""
    target: StageModel
    """The target agent after SFT on the experts (evaluated as iteration 0)."""


def shared_start(run: Run) -> SharedStart:
    """Stages experts, model, sft-target and eval-0 (with a validation slice, experts-valid
    first: the held-out demonstrations whose loss the SFT stage reports)."""
    experts = expert_demonstrations(run)
    held_out = expert_demonstrations(run, VALID) if run.config.env.valid_tasks else {}
    base = base_model(run)
    target = training.sft(
        run,
        "target",
        base,
        list(experts.values()),
        seed=run.config.seed,
        held_out=list(held_out.values()),
    )
    play.evaluate(run, target, iteration=0)
    return SharedStart(experts, base, target)


def expert_demonstrations(run: Run, split: str = "train") -> dict[str, Trajectory]:
    """Expert demonstrations of the `split` tasks that have one, by task id: of the training
    tasks (stage `experts`), or of the validation slice (`experts-valid`: never trained on)."""
    name = "experts" if split == "train" else f"experts-{split}"

    def stage(_: Path) -> ExpertsRecord:
        tasks = run.tasks(split)
        stored = run.store.trajectories(stage=name)
        if stored:  # committed before a kill cut this stage short
            return ExpertsRecord(len(tasks), len(stored))
        env = run.pool.acquire()
        trajectories, refused = [], []
        try:
            for task in tasks:
                try:
                    trajectories.append(expert_trajectory(env, task))
                except EnvError as exc:  # e.g. a ScienceWorld gold path found broken
                    refused.append(f"{task.id}: {exc}")
        finally:
            run.pool.release(env)
        # An expert that does not reach 1.0 is no demonstration: left out, and counted.
        solved = [t for t in trajectories if t.success]
        if len(solved) < len(tasks):
            console.print(
                f"[yellow]{name}: {len(tasks) - len(solved)} of {len(tasks)} {split} tasks "
                "have no demonstration reaching reward 1.0; they are left out[/]"
            )
        run.store.add_trajectories(solved, iteration=-1, stage=name)
        return ExpertsRecord(len(tasks), len(solved), refused[:20])

    run.stage(name, stage, ExpertsRecord.from_dict)
    return {t.task.id: t for t in run.store.trajectories(stage=name)}


def base_model(run: Run, agent: str | None = None) -> StageModel:
    """The starting checkpoint: the configured path, the named pretrained model (converted on
    first use), or a tiny model made for the env.

    A locally initialised model gets its weights from the run's seed, or for a second `agent`
    from a seed of its own (stage `model-<agent>`), so two agents SFT-trained "independently"
    also start from independent initialisations; the
    tokenizer is trained on the same corpus either way, so it is the same. With
    `model.pretrain_epochs`, the stage then warms the model up on the expert episodes.
    """
    cfg = run.config.model
    if cfg.path is not None:
        return StageModel(Path(cfg.path))
    if cfg.name is not None:
        from coevo.policy.models import get_model

        return StageModel(get_model(cfg.name, progress=console.print))
    seed = trainer_seed(run.config.seed, *([agent] if agent else []))
    name = f"model-{agent}" if agent else "model"

    def stage(out: Path) -> ModelRecord:
        from coevo.policy.tiny import init_model

        env = run.pool.acquire()
        try:
            init_dir = out / ("init" if cfg.pretrain_epochs else "model")
            info = init_model(env, cfg.size, init_dir, seed=seed)
        finally:
            run.pool.release(env)
        warm = pretrain(run, init_dir, out, seed) if cfg.pretrain_epochs else None
        return ModelRecord(info, warm)

    run.stage(name, stage, ModelRecord.from_dict, {"seed": seed, "size": cfg.size})
    return StageModel(run.dir / "stages" / name / "model")


def pretrain(run: Run, start: Path, out: Path, seed: int) -> SftRecord:
    """Language-model warm-up of `start` on the expert episodes, every token learned; the
    model goes to `out/model` (part of the `model` stage, which resumes it after a kill).

    The sft section's settings, with `model.pretrain_epochs` and `model.pretrain_lr`.
    """
    from transformers import AutoTokenizer

    from coevo.train.batches import lm_examples
    from coevo.train.sft import train_sft

    tokenizer = AutoTokenizer.from_pretrained(start)
    demos = list(expert_demonstrations(run).values())
    examples = lm_examples(demos, tokenizer, max_length=run.config.model.max_length)
    sft, model = run.config.sft, run.config.model
    config = replace(
        sft, epochs=model.pretrain_epochs, optim=replace(sft.optim, lr=model.pretrain_lr)
    )
    # What it trained with is written beside the model (model/train_config.json).
    result = train_sft(
        str(start), examples, config, **training.placement(run, out, seed, tokenizer)
    )
    return training.sft_record(len(examples), result)
