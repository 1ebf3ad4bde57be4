"""The policy exploration and evaluation play with: the backend the recipe names."""

from __future__ import annotations

from coevo.config import build
from coevo.run.context import Run, StageModel
from coevo.run.pipeline import Pipeline
from coevo.run.recipe import RunConfig
from coevo.stages.play import policy


def run_with(tmp_path, **values) -> Run:
    return Run(build(RunConfig, values), Pipeline(tmp_path, {}), None, None)  # type: ignore[arg-type]


def test_the_recipe_chooses_the_decoding_loop(tmp_path, nano_model_dir, monkeypatch):
    monkeypatch.delenv("COEVO_DECODE", raising=False)
    on_cpu = run_with(tmp_path / "a", model={"device": "cpu"})
    chosen = policy(on_cpu, StageModel(nano_model_dir), "target")
    assert chosen.decode == "eager"  # auto on the CPU (graphs on CUDA: tests/policy)
    run = run_with(tmp_path / "b", model={"device": "cpu", "decode": "static"})
    assert policy(run, StageModel(nano_model_dir), "target").decode == "static"


def test_the_recipe_chooses_the_backend(tmp_path, nano_model_dir, monkeypatch):
    from coevo.policy.hf import HFPolicy
    from coevo.policy.server import ServerPolicy

    local = policy(run_with(tmp_path / "a"), StageModel(nano_model_dir), "target")
    assert isinstance(local, HFPolicy) and local.name == "target"
    monkeypatch.setenv("TEST_SERVER_KEY", "secret")
    server = {"url": "http://gpu-box:8000/v1/", "model": "toy", "max_context": 512}
    server["api_key_env"] = "TEST_SERVER_KEY"
    lora = {"lora": {"r": 8}}  # the server loads each stage's adapter
    run = run_with(tmp_path / "b", model={"backend": "server"}, server=server, sft=lora, dpo=lora)
    remote = policy(run, StageModel(nano_model_dir), "failure")
    assert isinstance(remote, ServerPolicy)
    assert (remote.url, remote.model, remote.name) == (
        "http://gpu-box:8000/v1/completions",
        "toy",
        "failure",
    )
    assert remote.api_key == "secret" and remote.tokenizer.vocab == local.tokenizer.vocab


def test_a_model_in_memory_is_played_as_it_is(tmp_path, nano_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    module = AutoModelForCausalLM.from_pretrained(nano_model_dir, dtype=torch.float32)
    # The recipe's dtype is the module's (`auto` is bf16 on a GPU: a module of another dtype
    # is loaded anew rather than cast).
    same = run_with(tmp_path, model={"dtype": "float32"})
    played = policy(same, StageModel(nano_model_dir, module), "target")
    assert played.model is module  # not loaded again
    wide = policy(
        run_with(tmp_path, model={"dtype": "float64"}), StageModel(nano_model_dir, module), "t"
    )
    assert wide.model is not module and module.dtype == torch.float32  # never cast


def test_a_cut_exploration_keeps_the_episodes_that_ended(tmp_path, nano_model_dir):
    import pytest
    from transformers import AutoTokenizer

    from coevo.envs.pool import EnvPool
    from coevo.stages.play import play_and_store
    from coevo.store import Store
    from tests.test_rollout import FailingPolicy, ScriptedPolicy
    from tests.toy_env import ToyEnv

    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    tasks = ToyEnv().tasks("train")
    with Store(tmp_path / "run") as store, EnvPool(ToyEnv) as pool:
        run = Run(build(RunConfig, {}), Pipeline(tmp_path / "run", {}), store, pool)
        settings = {"stage": "explore-1-target", "iteration": 1, "samples": 2, "batch_size": 4}
        done: set[tuple[str, int]] = set()
        with pytest.raises(KeyboardInterrupt):  # as a kill mid-exploration
            play_and_store(
                run, FailingPolicy(tokenizer, 6), tasks, done, **settings, progress=False
            )
        kept = store.trajectories(stage="explore-1-target")
        assert kept and len(kept) < 2 * len(tasks)
        assert done == {(t.task.id, t.sample) for t in kept}
        # The rerun plays the tasks again but stores only the episodes the store lacks.
        play_and_store(run, ScriptedPolicy(tokenizer), tasks, done, **settings, progress=False)
        keys = [(t.task.id, t.sample) for t in store.trajectories(stage="explore-1-target")]
        assert sorted(keys) == sorted((t.id, k) for t in tasks for k in range(2))
        assert [(t.task.id, t.sample) for t in kept] == keys[: len(kept)]  # first ones untouched
