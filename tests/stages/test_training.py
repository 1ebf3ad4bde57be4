"""The training stages say in words when they learned nothing: no pairs, weights that did not
move from their start."""

from __future__ import annotations

import pytest
import torch

from coevo.config import build
from coevo.run.context import Run, StageModel
from coevo.run.pipeline import Pipeline
from coevo.run.recipe import RunConfig
from coevo.stages import training
from coevo.stages.training import Movement, movement
from coevo.store import Store
from coevo.trajectory import Pair, Task, Trajectory, Turn


def test_movement_is_the_change_from_the_start_checkpoint(nano_model_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(nano_model_dir, dtype=torch.float32)
    assert movement(nano_model_dir, model) == Movement(0.0, 0.0)
    with torch.no_grad():
        model.get_input_embeddings().weight[3, 5] += 0.25
    moved = movement(nano_model_dir, model)
    # One weight changed by 0.25: relative to the norm of every weight the checkpoint holds.
    start = load_file(nano_model_dir / "model.safetensors")
    norm = sum(float(t.double().square().sum()) for t in start.values()) ** 0.5
    assert moved is not None
    assert moved.largest == pytest.approx(0.25, rel=1e-5)
    assert moved.relative == pytest.approx(0.25 / norm, rel=1e-5)
    assert movement(tmp_path, model) is None  # no weights to compare with


def attempt(task: Task, agent: str, word: str, reward: float) -> Trajectory:
    turns = (
        Turn("user", f"Instruction: {task.instruction}"),
        Turn("assistant", f"Thought: type it.\nAction: type[{word}]"),
    )
    return Trajectory(task, agent, turns, reward, True, False, 1)


def toy_pairs() -> list[Pair]:
    from tests.toy_env import ToyEnv

    pairs = []
    for task in ToyEnv().tasks("train")[:2]:
        word = task.data["word"]
        expert = attempt(task, "expert", word, 1.0)
        pairs.append(Pair(expert, attempt(task, "target", "zzz", 0.0), "expert_vs_prediction"))
    return pairs


def dpo_run(tmp_path, lr: float) -> tuple[Run, Store]:
    values = {
        "model": {"device": "cpu", "dtype": "float32", "max_length": 512},
        "dpo": {"epochs": 1, "batch_size": 2, "optim": {"lr": lr}, "progress": False},
    }
    store = Store(tmp_path / "run")
    pipeline = Pipeline(tmp_path / "run", {})
    return Run(build(RunConfig, values), pipeline, store, None), store  # type: ignore[arg-type]


@pytest.mark.parametrize(("lr", "still"), [(0.0, True), (1e-3, False)])
def test_a_dpo_stage_whose_weights_did_not_move_says_so(
    tmp_path, nano_model_dir, capsys, lr, still
):
    run, store = dpo_run(tmp_path, lr)
    with store:
        trained = training.dpo(
            run, "target", StageModel(nano_model_dir), toy_pairs(), 1, run.config.dpo, seed=0
        )
    err = capsys.readouterr().err
    assert trained.path == tmp_path / "run/stages/dpo-1-target/model"
    assert ("dpo-1-target: the weights did not move" in err) == still
    assert ("dpo-1-target: weights moved: largest change" in err) == (not still)


def test_a_dpo_stage_without_pairs_warns_why(tmp_path, nano_model_dir, capsys):
    run, store = dpo_run(tmp_path, 1e-3)
    why = "all 8 rollouts succeeded, so none is worse than another"
    with store:
        start = StageModel(nano_model_dir)
        kept = training.dpo(run, "target", start, [], 1, run.config.dpo, seed=0, why_none=why)
    assert kept is start  # the model carries over
    err = capsys.readouterr().err
    assert f"dpo-1-target: no pairs ({why}): nothing to learn from" in err
