"""The training stages: SFT of an agent on trajectories (`sft-<name>`), DPO on pairs
(`dpo-<iteration>-<name>`).

Each trains in its own stage folder with the settings and seed its method's loop gives it,
records them in its manifest (`inputs.trained_with`: the trainer config and the seed), writes
the trained model to `<stage>/model` and hands it on in memory too (`Run.hand_on`), so the
next stage need not load it again. Trainers resume from their checkpoints after a kill.

A stage that learned nothing says so in words: a DPO stage without pairs, and any training
stage whose weights did not move from its start (`movement`: a learning rate of 0, updates
lost to a low-precision dtype, gradients that were all 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from coevo.run.context import Run, StageModel
from coevo.run.records import DpoRecord, SftRecord
from coevo.train.dpo import DpoConfig
from coevo.train.loop import TrainResult
from coevo.train.settings import settings_record
from coevo.trajectory import Pair, Trajectory


def sft(
    run: Run,
    name: str,
    start: StageModel,
    trajectories: list[Trajectory],
    seed: int,
    *,
    held_out: Sequence[Trajectory] = (),
) -> StageModel:
    """Fine-tune `start` on `trajectories` (stage `sft-<name>`) with the recipe's sft settings.

    `held_out`: demonstrations never trained on (the validation slice's); their loss per agent
    token before training and after each epoch is logged (`eval_loss`), kept in the record
    and said when the stage ends: what SFT did to tasks it did not see."""
    config = run.config.sft
    stage_name = f"sft-{name}"
    trained: dict[str, Any] = {}  # the module this call trains (none when done before)
    max_length = run.config.model.max_length

    def stage(out: Path) -> SftRecord:
        from coevo.train.batches import sft_examples
        from coevo.train.sft import train_sft

        def examples(tokenizer: Any) -> list[Any]:
            return sft_examples(trajectories, tokenizer, max_length=max_length)

        def train(model: Any, examples: list[Any], **placed: Any) -> TrainResult:
            unseen = sft_examples(held_out, placed["tokenizer"], max_length=max_length)
            return train_sft(model, examples, config, eval_examples=unseen, **placed)

        n, result = train_in_stage(run, stage_name, start, out, seed, examples, train, trained)
        record = sft_record(n, result)
        if record.held_out_loss:
            before, after = record.held_out_loss
            run.pipeline.say(
                stage_name,
                f"loss on {len(held_out)} held-out demonstrations {before:.3f} -> {after:.3f} "
                "per agent token",
            )
        return record

    inputs = {
        "start": str(start.path),
        "trajectories": len(trajectories),
        "held_out": len(held_out),
        "trained_with": settings_record(config, seed),
    }
    run.stage(stage_name, stage, SftRecord.from_dict, inputs, everyone=True)
    return run.hand_on(run.dir / "stages" / stage_name / "model", trained.get("module"))


def dpo(
    run: Run,
    name: str,
    start: StageModel,
    pairs: list[Pair],
    iteration: int,
    config: DpoConfig,
    seed: int,
    *,
    why_none: str = "",
) -> StageModel:
    """Preference training of `start` on `pairs` (stage `dpo-<iteration>-<name>`).

    The reference is `start` itself: the policy at the iteration's start (ETO). `config` is
    the phase's settings as the method's loop chose them. `why_none` says why there are no
    pairs, when there are none (`pairs.why_no_pairs`).
    """
    stage_name = f"dpo-{iteration}-{name}"
    inputs = {
        "start": str(start.path),
        "pairs": len(pairs),
        "trained_with": settings_record(config, seed),
    }
    if not pairs:
        # Nothing to learn from (e.g. every rollout succeeded): the model carries over.
        def skip(_: Path) -> DpoRecord:
            because = f" ({why_none})" if why_none else ""
            run.pipeline.warn(
                stage_name,
                f"no pairs{because}: nothing to learn from, so the stage is skipped and "
                "the model carries over untrained",
            )
            return DpoRecord(0, skipped=True)

        run.stage(stage_name, skip, DpoRecord.from_dict, inputs)
        return start
    trained: dict[str, Any] = {}

    def stage(out: Path) -> DpoRecord:
        from coevo.train.batches import dpo_examples
        from coevo.train.dpo import train_dpo

        # Stored once per stage: a rerun after a kill finds them already there.
        if run.processes.main and not run.store.pairs(stage=stage_name):
            run.store.add_pairs(pairs, iteration=iteration, stage=stage_name)

        def examples(tokenizer: Any) -> list[Any]:
            return dpo_examples(pairs, tokenizer, max_length=run.config.model.max_length)

        train = partial(train_dpo, config=config)
        _, result = train_in_stage(run, stage_name, start, out, seed, examples, train, trained)
        last = next((r for r in reversed(result.history) if "loss" in r), {})
        return DpoRecord(
            pairs=len(pairs),
            pair_kinds=dict(Counter(pair.kind for pair in pairs)),
            steps=result.step,
            final={k: v for k, v in last.items() if isinstance(v, int | float)},
        )

    run.stage(stage_name, stage, DpoRecord.from_dict, inputs, everyone=True)
    return run.hand_on(run.dir / "stages" / stage_name / "model", trained.get("module"))


# Weights that moved by less than this share of their norm did not move: a model trained on
# purpose moves by orders more (a few DPO steps at lr 1e-6 on SmolLM2-135M: about 1e-4).
STILL = 1e-6


@dataclass(frozen=True)
class Movement:
    """How far training moved a model's weights from its start."""

    largest: float
    """The largest change of one weight, max |after - before|."""
    relative: float
    """||after - before|| / ||before|| over every weight compared (L2, all tensors as one)."""


def movement(start: Path, model: Any) -> Movement | None:
    """How far `model` moved from the checkpoint in `start`, read from its safetensors one
    tensor at a time (the start's weights are never held whole beside the model); None when
    `start` holds no weights under the model's names (an adapter, another layout)."""
    import torch
    from safetensors import safe_open

    state = model.state_dict()
    largest, moved, norm, compared = 0.0, 0.0, 0.0, 0
    with torch.no_grad():
        for file in sorted(Path(start).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as weights:
                for key in sorted(set(weights.keys()) & state.keys()):
                    after = state[key].detach()
                    before = weights.get_tensor(key).to(after.device, torch.float32)
                    if before.shape != after.shape:
                        continue
                    # Exact in float32: the difference of two nearby floats loses nothing.
                    delta = after.float() - before
                    largest = max(largest, float(delta.abs().max()))
                    moved += float(delta.square().sum(dtype=torch.float64))
                    norm += float(before.square().sum(dtype=torch.float64))
                    compared += 1
    if not compared or norm == 0:
        return None
    return Movement(largest, (moved / norm) ** 0.5)


def say_movement(run: Run, stage: str, start: Path, model: Any) -> None:
    """Say how far a training stage moved the weights from `start`, as a warning when they
    did not move (below STILL)."""
    if not run.processes.main:
        return
    moved = movement(start, model)
    if moved is None:
        return
    how = f"largest change {moved.largest:.2g}, {moved.relative:.2g} of their norm"
    if moved.relative < STILL:
        run.pipeline.warn(
            stage,
            f"the weights did not move ({how}): nothing was learned. Check the learning rate, "
            "the model's dtype and the loss.",
        )
    else:
        run.pipeline.say(stage, f"weights moved: {how}")


def served_adapter(run: Run, start: StageModel, out: Path) -> None:
    """With a generation server and LoRA, the adapter that makes the server's base model this
    stage's model (`coevo.run.serving`); written by the main process only."""
    if run.config.model.backend != "server" or run.config.server.reload_command:
        return
    if (out / "adapter").is_dir() and run.processes.main:
        from coevo.run.serving import stack_adapter

        stack_adapter(start.path, out)


def train_in_stage(
    run: Run,
    stage_name: str,
    start: StageModel,
    out: Path,
    seed: int,
    examples_of: Callable[[Any], list[Any]],
    train: Callable[..., TrainResult],
    trained: dict[str, Any],
) -> tuple[int, TrainResult]:
    """What both training stages do in their folder `out`: the examples in `start`'s tokens,
    `train(model, examples, **placement)`, the trained module kept in `trained` for the next
    stage, its adapter served, how far its weights moved said. (examples, the result)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(start.path)
    examples = examples_of(tokenizer)
    result = train(starting_point(start), examples, **placement(run, out, seed, tokenizer))
    trained["module"] = result.model
    served_adapter(run, start, out)
    say_movement(run, stage_name, start.path, result.model)
    return len(examples), result


def placement(run: Run, out: Path, seed: int, tokenizer: Any) -> dict[str, Any]:
    """What a stage's trainer call takes from the run: where it writes, its seed, the
    tokenizer it saves with the model, and the device (`model.device`: `cpu` or accelerate's)."""
    return {
        "output_dir": out,
        "seed": seed,
        "tokenizer": tokenizer,
        "device": run.config.model.device,
    }


def starting_point(start: StageModel) -> Any:
    """The module or directory a trainer starts from. A module an earlier stage trained gets
    back the state a freshly loaded one has: every weight trainable, no activation
    checkpointing (that stage may have frozen layers or merged LoRA adapters)."""
    model = start.take()
    if isinstance(model, Path):
        return str(model)
    model.requires_grad_(True)
    # (transformers 5 renamed it; the old name warns there.)
    disable = getattr(model, "activation_checkpointing_disable", None)
    (disable or model.gradient_checkpointing_disable)()
    return model


def sft_record(examples: int, result: TrainResult) -> SftRecord:
    losses = [r["loss"] for r in result.history if "loss" in r]
    held_out = [r["eval_loss"] for r in result.history if "eval_loss" in r]
    return SftRecord(
        examples,
        result.step,
        losses[-1] if losses else None,
        [held_out[0], held_out[-1]] if len(held_out) > 1 else None,
    )
