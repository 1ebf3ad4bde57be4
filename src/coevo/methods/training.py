"""The training stages: SFT of an agent on trajectories (`sft-<name>`), DPO on pairs
(`dpo-<iteration>-<name>`).

Each trains in its own stage folder with the settings and seed its method's loop gives it,
records them in its manifest (`inputs.trained_with`: the trainer config and the seed), writes
the trained model to `<stage>/model` and hands it on in memory too (`Run.hand_on`), so the
next stage need not load it again. Trainers resume from their checkpoints after a kill.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from coevo.methods.run import Run, StageModel
from coevo.records import DpoRecord, SftRecord
from coevo.train.dpo import DpoConfig
from coevo.train.loop import TrainResult
from coevo.train.settings import settings_record
from coevo.trajectory import Pair, Trajectory


def sft(
    run: Run, name: str, start: StageModel, trajectories: list[Trajectory], seed: int
) -> StageModel:
    """Fine-tune `start` on `trajectories` (stage `sft-<name>`) with the recipe's sft settings."""
    config = run.config.sft
    stage_name = f"sft-{name}"
    trained: dict[str, Any] = {}  # the module this call trains (none when done before)

    def stage(out: Path) -> SftRecord:
        from transformers import AutoTokenizer

        from coevo.train.batches import sft_examples
        from coevo.train.sft import train_sft

        tokenizer = AutoTokenizer.from_pretrained(start.path)
        examples = sft_examples(trajectories, tokenizer, max_length=run.config.model.max_length)
        where = placement(run, out, seed, tokenizer)
        result = train_sft(starting_point(start), examples, config, **where)
        trained["module"] = result.model
        served_adapter(run, start, out)
        return sft_record(len(examples), result)

    inputs = {
        "start": str(start.path),
        "trajectories": len(trajectories),
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
            run.pipeline.say(stage_name, f"skipped, no pairs{because}; the model carries over")
            return DpoRecord(0, skipped=True)

        run.stage(stage_name, skip, DpoRecord.from_dict, inputs)
        return start
    trained: dict[str, Any] = {}

    def stage(out: Path) -> DpoRecord:
        from transformers import AutoTokenizer

        from coevo.train.batches import dpo_examples
        from coevo.train.dpo import train_dpo

        # Stored once per stage: a rerun after a kill finds them already there.
        if run.processes.main and not run.store.pairs(stage=stage_name):
            run.store.add_pairs(pairs, iteration=iteration, stage=stage_name)
        tokenizer = AutoTokenizer.from_pretrained(start.path)
        examples = dpo_examples(pairs, tokenizer, max_length=run.config.model.max_length)
        where = placement(run, out, seed, tokenizer)
        result = train_dpo(starting_point(start), examples, config, **where)
        trained["module"] = result.model
        served_adapter(run, start, out)
        last = next((r for r in reversed(result.history) if "loss" in r), {})
        return DpoRecord(
            pairs=len(pairs),
            pair_kinds=dict(Counter(pair.kind for pair in pairs)),
            steps=result.step,
            final={k: v for k, v in last.items() if isinstance(v, int | float)},
        )

    run.stage(stage_name, stage, DpoRecord.from_dict, inputs, everyone=True)
    return run.hand_on(run.dir / "stages" / stage_name / "model", trained.get("module"))


def served_adapter(run: Run, start: StageModel, out: Path) -> None:
    """With a generation server and LoRA, the adapter that makes the server's base model this
    stage's model (`coevo.methods.serving`); written by the main process only."""
    if run.config.model.backend != "server" or run.config.server.reload_command:
        return
    if (out / "adapter").is_dir() and run.processes.main:
        from coevo.methods.serving import stack_adapter

        stack_adapter(start.path, out)


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
    return SftRecord(examples, result.step, losses[-1] if losses else None)
