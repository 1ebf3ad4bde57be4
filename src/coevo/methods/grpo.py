"""GRPO: the shared SFT start, then multi-turn GRPO, evaluated every `grpo.eval_every` steps.

Stages: the shared start (experts, model, sft-target, eval-0), then per evaluation interval i
a training stage `grpo-<i>` (the GRPO steps up to i * eval_every) and its evaluation `eval-<i>`,
so a rerun skips finished intervals. One trainer folder, `stages/grpo`, holds the checkpoints
and `metrics.jsonl` of every interval: each `grpo-<i>` resumes the run where the one before
stopped (the same optimizer, schedule and step), and its model goes to `grpo-<i>/model`.
The rollouts of every step are stored (stage `grpo-<i>`, iteration = the step). A finished
run whose `grpo.steps` grows keeps its intervals, its last one included, and continues after
it (`interval_ends`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coevo.envs.base import Env
from coevo.envs.pool import EnvPool
from coevo.rollout import rollout
from coevo.run.context import Run, StageModel
from coevo.run.recipe import GrpoSection
from coevo.run.records import GrpoRecord
from coevo.stages import play
from coevo.stages.play import open_policy
from coevo.stages.shared import shared_start
from coevo.stages.training import say_movement, starting_point
from coevo.train.groups import Player
from coevo.train.grpo import copy_for_saving
from coevo.train.model import save_model
from coevo.train.settings import settings_record
from coevo.trajectory import Task, Trajectory

TRAINER_DIR = "grpo"


def hf_player(
    model_dir: str | Path,
    envs: EnvPool | Callable[[], Env],
    config: GrpoSection,
    *,
    max_length: int | None = None,
    cut_block: int = 0,
    agent: str = "target",
    decode: str = "auto",
    on_played: Callable[[int, list[Trajectory]], None] | None = None,
) -> Player:
    """Play the trained module in-process (HFPolicy around the module itself, so every update
    reaches generation in memory), with lockstep rollouts and the config's sampling settings.

    `model_dir` gives the tokenizer and chat template; `on_played(step, episodes)` sees every
    step's episodes (the method stores them).
    """
    sampling = config.sampling.sampling(logprobs=True)
    held: dict[str, Any] = {}

    def play(module: Any, tasks: Sequence[Task], *, step: int, seed: int) -> list[Trajectory]:
        if held.get("module") is not module:
            device = str(next(module.parameters()).device)
            held["policy"] = open_policy(
                model_dir,
                name=agent,
                module=module,
                dtype=module.dtype,
                device=device,
                decode=decode,
            )
            held["module"] = module
        played = rollout(
            held["policy"],
            envs,
            tasks,
            sampling=sampling,
            samples=config.samples,
            batch_size=config.rollout_batch_size,
            seed=seed,
            agent=agent,
            max_length=max_length,
            cut_block=cut_block,
            progress=False,  # the trainer's bar is on screen
        )
        if on_played is not None:
            on_played(step, played)
        return played

    return play


def intervals(steps: int, every: int) -> list[int]:
    """The step each evaluation interval ends at: every `every` steps, and the last."""
    ends = list(range(every, steps, every))
    return [*ends, steps]


def interval_ends(run: Run, *every: int) -> list[int]:
    """The step each stage `grpo-<i>` ends at: the finished stages' ends as they ran, then
    every `every` steps (each of them) and the last step. A run extended by more
    `grpo.steps` keeps its finished intervals even where its last one ended off that grid."""
    kept: list[int] = []
    while (record := run.pipeline.manifest(f"grpo-{len(kept) + 1}")) is not None:
        kept.append(record["inputs"]["steps"][1])
    done = kept[-1] if kept else 0
    later = {end for e in every for end in intervals(run.config.grpo.steps, e) if end > done}
    return kept + sorted(later)


def run_grpo(run: Run) -> None:
    cfg = run.config
    start = shared_start(run)
    train = run.tasks("train")
    first = 0
    for i, until in enumerate(interval_ends(run, cfg.grpo.eval_every), start=1):
        model = grpo_stage(run, start.target, train, i, first, until)
        play.evaluate(run, model, i)
        first = until


def grpo_stage(
    run: Run,
    start: StageModel,
    tasks: list[Task],
    interval: int,
    done: int,
    until: int,
    *,
    step_tasks: Callable[[int], Sequence[Task]] | None = None,
    more_inputs: dict[str, Any] | None = None,
) -> StageModel:
    """GRPO steps done + 1 ... until (stage `grpo-<interval>`), resuming the trainer's folder.

    Every interval starts the trainer from the SFT model (the KL reference) and its checkpoint
    puts back the weights, optimizer and schedule of step `done`. `step_tasks` picks each
    step's tasks (default: seeded passes over `tasks`); `more_inputs` go into the manifest.
    """
    cfg = run.config
    name = f"grpo-{interval}"
    config = cfg.grpo
    trained: dict[str, Any] = {}

    def store(step: int, played: list[Trajectory]) -> None:
        # A step replayed after a kill plays the same episodes: stored once.
        if next(run.store.stored_trajectories(stage=name, iteration=step), None) is None:
            run.store.add_trajectories(played, iteration=step, stage=name)

    def stage(out: Path) -> GrpoRecord:
        from transformers import AutoTokenizer

        from coevo.train.grpo import train_grpo

        tokenizer = AutoTokenizer.from_pretrained(start.path)
        play = hf_player(
            start.path,
            run.pool,
            config,
            max_length=cfg.model.max_length,
            cut_block=cfg.model.cut_block,
            decode=cfg.model.decode,
            on_played=store,
        )
        result = train_grpo(
            starting_point(start),
            tasks,
            play,
            config,
            output_dir=run.dir / "stages" / TRAINER_DIR,
            tokenizer=tokenizer,
            seed=cfg.seed,
            max_length=cfg.model.max_length,
            device=cfg.model.device,
            step_tasks=step_tasks,
            # Each interval's call ends at its last step; the next resumes the trainer there.
            stop_after_steps=until,
            save_model=False,  # this stage saves the model it hands on (below)
        )
        model = copy_for_saving(result.model)
        save_model(model, out / "model", tokenizer)
        trained["module"] = model
        steps = [r for r in result.history if done < r["step"] <= until]
        last = steps[-1] if steps else {}
        say_signal(run, name, [r["no_signal"] for r in steps])
        # From the model the interval started with: the one before's, or the SFT start.
        before = run.dir / "stages" / f"grpo-{interval - 1}" / "model"
        say_movement(run, name, before if interval > 1 and before.is_dir() else start.path, model)
        return GrpoRecord(
            steps=result.step,
            first_step=done + 1,
            reward=[r["reward_mean"] for r in steps],
            success=[r["success_rate"] for r in steps],
            no_signal=[r["no_signal"] for r in steps],
            final={k: v for k, v in last.items() if isinstance(v, int | float)},
        )

    inputs = {
        "start": str(start.path),
        "steps": [done + 1, until],
        "trained_with": settings_record(cfg.grpo, cfg.seed),
        **(more_inputs or {}),
    }
    run.stage(name, stage, GrpoRecord.from_dict, inputs)
    return run.hand_on(run.dir / "stages" / name / "model", trained.get("module"))


# Above this mean share of task groups without signal, most of a stage's rollouts taught nothing.
MOSTLY = 0.5


def no_signal_note(no_signal: list[float]) -> tuple[str, bool] | None:
    """What a GRPO stage's steps say about their signal, in words, and whether it is a warning
    (a step skipped for want of any, or most groups without it); `no_signal`: each step's share
    of task groups whose samples all scored alike (advantage 0, nothing to learn)."""
    if not no_signal:
        return None
    skipped = sum(share >= 1.0 for share in no_signal)
    mean = sum(no_signal) / len(no_signal)
    groups = f"{mean:.0%} of task groups had no signal (every sample of the task scored alike)"
    if skipped:
        return (
            f"{skipped} of {len(no_signal)} steps had no signal in any group, so their updates "
            f"were skipped; {groups}. Raise grpo.samples or the sampling temperature, or train "
            "on tasks the model sometimes solves.",
            True,
        )
    return groups, mean >= MOSTLY


def say_signal(run: Run, stage: str, no_signal: list[float]) -> None:
    note = no_signal_note(no_signal)
    if note is None or not run.processes.main:
        return
    text, warning = note
    (run.pipeline.warn if warning else run.pipeline.say)(stage, text)
