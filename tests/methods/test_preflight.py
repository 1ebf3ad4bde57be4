"""A bad recipe is one sentence before any stage runs, and leaves no run directory behind."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from coevo.cli import app
from coevo.config import ConfigError, build
from coevo.envs.base import EnvError, make
from coevo.envs.conversation import opening_message
from coevo.methods.preflight import check_recipe, prompt_counter
from coevo.methods.runner import execute
from coevo.run.pipeline import RunDirError
from coevo.run.recipe import RunConfig
from tests.methods.test_run import FAST


def recipe(**changes) -> RunConfig:
    return build(RunConfig, {**FAST, **changes})


def toy_with(**options) -> dict:
    return {"name": "tests.toy_env:ToyEnv", "options": options}


@pytest.mark.parametrize(
    ("changes", "error", "needle"),
    [
        ({"env": {"name": "shopp"}}, EnvError, "Unknown env 'shopp'"),
        ({"env": {"name": "shop", "options": {"n_products": 0}}}, EnvError, "n_products must"),
        (
            {"env": toy_with(colour="red")},
            EnvError,
            "env 'tests.toy_env:ToyEnv' has no option 'colour': its options are max_steps, "
            "n_tasks.",
        ),
        (
            {"env": toy_with(max_steps="many")},
            EnvError,
            "env option max_steps must be an integer, not 'many'",
        ),
        ({"model": {"path": "/nowhere/model"}}, ConfigError, "no directory '/nowhere/model'"),
        # A hub name: coevo loads local checkpoints, and says so without trying the network.
        (
            {"model": {"path": "HuggingFaceTB/SmolLM2-135M"}},
            ConfigError,
            "no directory 'HuggingFaceTB/SmolLM2-135M'; model.path is a local checkpoint "
            "directory (coevo does not download from the Hugging Face Hub",
        ),
        ({"model": {"path": "."}}, ConfigError, "'.' is not a Hugging Face checkpoint directory"),
        (
            {"model": {"size": "nano", "max_length": 40}},
            ConfigError,
            "model.max_length=40 is too small: the instruction and first observation of task "
            "'toy/train/0' take at least 25 tokens and a reply up to 24 more",
        ),
    ],
)
def test_a_bad_recipe_is_refused_before_the_run_directory_exists(tmp_path, changes, error, needle):
    out = tmp_path / "run"
    with pytest.raises(error, match=needle.replace("(", r"\(")):
        execute(recipe(**changes), out, quiet=True)
    assert not out.exists()  # so the corrected recipe runs in the same --out


def test_the_cli_says_it_in_one_sentence(tmp_path):
    config = tmp_path / "r.yaml"
    config.write_text("env:\n  name: tests.toy_env:ToyEnv\nmodel:\n  max_length: 40\n")
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: model.max_length=40 is too small")
    assert not (tmp_path / "run").exists()


def test_a_fitting_recipe_passes(tmp_path):
    check_recipe(recipe())  # FAST: max_length 512


def test_a_checkpoint_counts_exactly_and_the_local_bound_never_overcounts(tmp_path):
    from transformers import AutoTokenizer

    from coevo.policy.tiny import init_model
    from coevo.render import render_prompt
    from coevo.trajectory import Turn

    env = make("tests.toy_env:ToyEnv")
    init_model(env, "nano", tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    exact, is_exact = prompt_counter(tmp_path / "model")
    bound, bound_is_exact = prompt_counter(None)
    assert is_exact and not bound_is_exact
    for task in env.tasks("train") + env.tasks("test_seen"):
        text = opening_message(env, env.reset(task)[0])
        tokens = len(render_prompt([Turn("user", text)], tokenizer))
        assert exact(text) == tokens
        assert bound(text) <= tokens  # a lower bound: it never refuses a recipe that fits
    small = recipe(model={"path": str(tmp_path / "model"), "max_length": 40})
    with pytest.raises(ConfigError, match=r"take \d+ tokens and a reply up to 24 more"):
        check_recipe(small)


def test_a_damaged_store_stops_the_run_with_one_sentence_and_is_kept(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    db = out / "store.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"\x10\x00\x01\x01" + b"\xff" * 5000)
    before = db.read_bytes()
    with pytest.raises(RunDirError, match=f"{str(db)!r} is damaged"):
        execute(recipe(), out, quiet=True)
    assert db.read_bytes() == before
    assert not (out / "stages").exists()  # no stage ran


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (
            "explore.sampling.temperature=-1",
            "explore.sampling.temperature must be >= 0 (0 = greedy), got -1.0",
        ),
        ("explore.sampling.top_p=0", "explore.sampling.top_p must be in (0, 1], got 0.0"),
        (
            "eval.sampling.max_new_tokens=0",
            "eval.sampling.max_new_tokens must be at least 1, got 0",
        ),
        (
            "agent_data.explorer.sampling.top_p=2",
            "agent_data.explorer.sampling.top_p must be in (0, 1], got 2.0",
        ),
        ("env.train_tasks=0", "env.train_tasks must be >= 1, got 0"),
        ("env.eval_tasks=0", "env.eval_tasks must be >= 1, got 0"),
        ("explore.batch_size=0", "explore.batch_size must be >= 1, got 0"),
        (
            "dpo.checkpoints.stop_after_steps=3",
            "Config key 'dpo.checkpoints.stop_after_steps' is gone: the stage decides it "
            "(train_*'s `stop_after_steps` argument); a run resumes after a kill, stops with "
            "Ctrl-C and always hands its model on",
        ),
    ],
)
def test_every_sampling_value_and_count_is_checked_before_anything_runs(tmp_path, override, needle):
    config = tmp_path / "r.yaml"
    config.write_text("env:\n  name: tests.toy_env:ToyEnv\nmethod: eto\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(out), override])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {needle}."
    assert not out.exists()


def test_out_pointing_at_a_file_is_one_sentence(tmp_path):
    config = tmp_path / "r.yaml"
    config.write_text("env:\n  name: tests.toy_env:ToyEnv\n")
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(taken)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: --out '{taken}' is a file, not a directory")
    assert "Traceback" not in result.output and taken.read_text() == "mine"
