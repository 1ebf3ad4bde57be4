from __future__ import annotations

import sys
from pathlib import Path

import pytest

from coevo.config import load
from coevo.run.recipe import RunConfig

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*/*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_recipe_loads_and_runs_the_pretrained_model(path):
    config = load(RunConfig, path, [])
    config.validate()
    assert config.model.name == "smollm2-135m" and config.model.path is None
    assert config.model.threads() == 2
    assert config.env.name == path.parent.name


def test_a_random_init_model_is_one_override_away():
    path = CONFIGS[0]
    config = load(RunConfig, path, ["model.name=null", "model.size=nano"])
    config.validate()
    assert config.model.name is None and config.model.threads() == 1


def test_valid_slice_needs_valid_tasks():
    from coevo.config import ConfigError

    with pytest.raises(ConfigError, match="valid_tasks"):
        load(RunConfig, CONFIGS[0], ["eval.splits=[valid]"])
    config = load(RunConfig, CONFIGS[0], ["eval.splits=[valid]", "env.valid_tasks=5"])
    assert config.eval.splits == ["valid"]


def test_valid_split_is_the_train_tail_the_run_never_trains_on(tmp_path):
    from coevo.config import build
    from coevo.envs.base import make
    from coevo.envs.pool import EnvPool
    from coevo.run.context import Run
    from coevo.run.pipeline import Pipeline

    values = {
        "env": {"name": "tests.toy_env:ToyEnv", "valid_tasks": 3, "train_tasks": 4},
        "model": {"size": "nano"},
    }
    config = build(RunConfig, values)
    pool = EnvPool(lambda: make(config.env.name))
    run = Run(config, Pipeline(tmp_path, {}), None, pool)  # type: ignore[arg-type]
    try:
        everything = [t.id for t in make(config.env.name).tasks("train")]
        train = [t.id for t in run.tasks("train")]
        valid = [t.id for t in run.tasks("valid")]
    finally:
        pool.close()
    assert valid == everything[-3:]
    assert train == everything[:4] and not set(train) & set(valid)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sft.lr=1e-5", "Config key 'sft.lr' has moved to 'sft.optim.lr'"),
        ("dpo.lora_r=16", "Config key 'dpo.lora_r' has moved to 'dpo.lora.r'"),
        ("sft.train_layers=10", "Config key 'sft.train_layers' has moved to 'sft.compute."),
        ("dpo.save_every_minutes=5", "'dpo.save_every_minutes' has moved to 'dpo.checkpoints."),
        ("later_lr=5e-7", "Config key 'later_lr' has moved to 'eto.later_lr'"),
        ("later_beta=0.5", "Config key 'later_beta' has moved to 'eto.later_beta'"),
        ("lambda_sft=0.5", "Config key 'lambda_sft' has moved to 'failure_agent.lambda_sft'"),
        ("within_agent_pairs=false", "'within_agent_pairs' has moved to 'failure_agent.within_"),
        ("hard_negative_threshold=0.5", "has moved to 'analysis.hard_negative_threshold'"),
        ("explore.temperature=0.5", "'explore.temperature' has moved to 'explore.sampling.temp"),
        ("eval.max_new_tokens=9", "'eval.max_new_tokens' has moved to 'eval.sampling.max_new_"),
        ("grpo.top_p=0.9", "'grpo.top_p' has moved to 'grpo.sampling.top_p'"),
        (
            "agent_data.explorer.server=http://x/v1",
            "'agent_data.explorer.server' has moved to 'agent_data.explorer.server.url'",
        ),
        (
            "agent_data.explorer.server_model=m",
            "'agent_data.explorer.server_model' has moved to 'agent_data.explorer.server.model'",
        ),
        ("sft.seed=3", "Config key 'sft.seed' is gone: the trainers are seeded from the run's"),
        ("dpo.output_dir=x", "Config key 'dpo.output_dir' is gone: each stage trains in its own"),
        ("sft.checkpoints.resume=false", "'sft.checkpoints.resume' is gone: the stage decides it"),
        ("grpo.checkpoints.stop_after_steps=3", "'grpo.checkpoints.stop_after_steps' is gone"),
        ("dpo.save_final_model=false", "'dpo.save_final_model' is gone"),
    ],
)
def test_an_old_setting_name_says_where_it_went(override, message):
    from coevo.config import ConfigError

    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load(RunConfig, CONFIGS[0], [override])


def test_a_run_directorys_own_recipe_from_an_earlier_coevo_loads_up_to_date(tmp_path):
    """`coevo run RUN_DIR/config.yaml --out RUN_DIR` resumes a run saved before keys moved or
    left; the same file elsewhere is a recipe someone wrote, and is told what changed."""
    import yaml

    from coevo.config import ConfigError
    from coevo.run.recipe import load_recipe

    saved = {
        "method": "eto",
        "explore": {"temperature": 0.5},
        "sft": {"epochs": 2, "checkpoints": {"resume": True, "save_final_model": True}},
    }
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
    (run_dir / "run.json").write_text("{}")
    config = load_recipe(run_dir / "config.yaml", ["iterations=2"])
    assert (config.explore.sampling.temperature, config.sft.epochs, config.iterations) == (
        0.5,
        2,
        2,
    )
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(ConfigError, match="'explore.temperature' has moved"):
        load_recipe(tmp_path / "recipe.yaml")


def test_a_section_keeps_its_own_defaults_under_a_partial_override():
    config = load(RunConfig, CONFIGS[0], ["dpo.optim.lr=2e-6"])
    # DPO's optimiser defaults (10% warm-up, constant), not those of the Optim class.
    assert (config.dpo.optim.lr, config.dpo.optim.warmup_ratio) == (2e-6, 0.1)
    assert config.dpo.optim.schedule == "constant"


def test_a_run_hands_models_on_through_their_folders():
    from coevo.config import ConfigError

    with pytest.raises(ConfigError, match="sft.checkpoints.save_final_model' is gone"):
        load(RunConfig, CONFIGS[0], ["sft.checkpoints.save_final_model=false"])
    with pytest.raises(ConfigError, match="server.url or server.model is not set"):
        load(RunConfig, CONFIGS[0], ["model.backend=server"])
    server = ["model.backend=server", "server.url=http://h:8000/v1", "server.model=m"]
    with pytest.raises(ConfigError, match="dpo.lora.r trains every weight: set server.reload"):
        load(RunConfig, CONFIGS[0], [*server, "method=eto", "sft.lora.r=8"])
    load(RunConfig, CONFIGS[0], [*server, "method=eto", "server.reload_command=restart {model}"])
    # GRPO trains every weight of the module it plays, LoRA or not: the server needs a reload.
    for name in ("grpo", "agent_data"):
        with pytest.raises(ConfigError, match=f"but {name} trains every weight"):
            load(RunConfig, CONFIGS[0], [*server, f"method={name}", "sft.lora.r=8"])


def test_env_workers_without_ray_name_the_install(monkeypatch):
    from coevo.config import ConfigError

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ConfigError, match=r"needs Ray.*pip install 'coevo\[ray\]'"):
        load(RunConfig, CONFIGS[0], ["rollout.workers=2"])
    assert load(RunConfig, CONFIGS[0], ["rollout.workers=0"]).rollout.workers == 0
