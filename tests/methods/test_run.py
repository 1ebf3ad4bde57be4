"""Runs of the methods end to end on nano models and the toy env: stages, pairs, resume."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from coevo.analysis.compare import compare
from coevo.cli import app
from coevo.config import ConfigError, build, load
from coevo.methods.plan import Scope, announce
from coevo.methods.registry import method
from coevo.methods.runner import env_pool, execute, recorded
from coevo.run.context import Run
from coevo.run.estimate import DPO, measured
from coevo.run.pipeline import Pipeline
from coevo.run.recipe import RunConfig
from coevo.seeds import derive, trainer_seed
from coevo.store import Store
from tests.methods.kill import run_until_rows

ROOT = Path(__file__).resolve().parents[2]

# Small and fast: toy env (8 tasks a split), nano model, short replies, 2 iterations. On the
# CPU in float32 wherever the suite runs: runs are compared record for record and byte for
# byte (a nano `coevo run` on a GPU is tests/test_gpu.py's).
FAST = {
    "env": {"name": "tests.toy_env:ToyEnv", "options": {}},
    "model": {"size": "nano", "max_length": 512, "device": "cpu", "dtype": "float32"},
    "iterations": 2,
    "sft": {"epochs": 8, "batch_size": 4, "optim": {"lr": 3e-3}, "progress": False},
    "dpo": {"epochs": 1, "batch_size": 4, "optim": {"lr": 1e-4}, "progress": False},
    "explore": {"samples": 2, "sampling": {"max_new_tokens": 24}, "batch_size": 16, "chunk": 4},
    "eval": {"sampling": {"max_new_tokens": 24}, "batch_size": 16},
}


def recipe(**changes) -> RunConfig:
    return build(RunConfig, {**FAST, **changes})


@pytest.fixture(scope="module")
def failure_run(tmp_path_factory) -> Path:
    return execute(
        recipe(method="failure_agent"), tmp_path_factory.mktemp("fa") / "run", quiet=True
    )


def manifest_times(run: Path) -> dict[str, float]:
    import json

    return {
        p.parent.name: json.loads(p.read_text())["finished"]
        for p in (run / "stages").glob("*/manifest.json")
    }


def test_failure_agent_runs_every_stage(failure_run):
    stages = set(manifest_times(failure_run))
    expected = {"experts", "model", "model-failure", "sft-target", "sft-failure", "eval-0"}
    for i in (1, 2):
        expected |= {
            f"explore-{i}-target",
            f"explore-{i}-failure",
            f"dpo-{i}-failure",
            f"dpo-{i}-target",
            f"eval-{i}",
        }
    assert expected <= stages
    assert (failure_run / "config.yaml").is_file()


def test_failure_agent_stores_explorations_and_pairs(failure_run):
    with Store(failure_run, create=False) as store:
        for i in (1, 2):
            for agent in ("target", "failure"):
                rows = store.trajectories(stage=f"explore-{i}-{agent}")
                # 8 train tasks x 2 samples, each (task, sample) exactly once.
                keys = [(t.task.id, t.sample) for t in rows]
                assert len(keys) == 16 and len(set(keys)) == 16
        failure_pairs = store.pairs(stage="dpo-1-failure")
        target_pairs = store.pairs(stage="dpo-1-target")
    # The failure agent learns from failures only; the target from experts and failures.
    assert all(p.kind == "failure_vs_failure" for p in failure_pairs)
    assert all(p.chosen.reward > p.rejected.reward for p in failure_pairs + target_pairs)
    kinds = {p.kind for p in target_pairs}
    assert {"expert_vs_target", "expert_vs_failure"} <= kinds
    for task in {p.task.id for p in target_pairs}:
        weights = [
            p.weight for p in target_pairs if p.task.id == task and p.chosen.agent == "expert"
        ]
        assert sum(weights) == pytest.approx(1.0)


def stage_inputs(run: Path, stage: str) -> dict:
    return json.loads((run / "stages" / stage / "manifest.json").read_text())["inputs"]


def test_every_training_stage_records_what_it_trained_with(failure_run):
    trained = {
        s: stage_inputs(failure_run, s)["trained_with"] for s in ("sft-target", "sft-failure")
    }
    seeds = (trained["sft-target"]["seed"], trained["sft-failure"]["seed"])
    assert seeds == (0, trainer_seed(0, "failure"))  # coevo.seeds: one seed per part
    assert trained["sft-target"]["optim"]["lr"] == FAST["sft"]["optim"]["lr"]
    # ETO's schedule, which the failure-agent method follows: from iteration 2 on, eto.later_*.
    defaults = build(RunConfig, {}).eto
    for agent in ("target", "failure"):
        first = stage_inputs(failure_run, f"dpo-1-{agent}")["trained_with"]
        second = stage_inputs(failure_run, f"dpo-2-{agent}")["trained_with"]
        assert (first["optim"]["lr"], first["beta"]) == (1e-4, 0.1)
        assert first["seed"] == trainer_seed(0, "dpo", 1)
        assert (second["optim"]["lr"], second["beta"]) == (defaults.later_lr, defaults.later_beta)
        assert second["seed"] == trainer_seed(0, "dpo", 2)
    explored = stage_inputs(failure_run, "explore-1-target")
    assert explored["seed"] == derive(0, "explore", 1) and explored["samples"] == 2


def test_the_saved_recipe_is_the_one_its_method_read(failure_run):
    saved = yaml.safe_load((failure_run / "config.yaml").read_text())
    assert {"eto", "failure_agent", "dpo", "explore", "iterations"} <= saved.keys()
    assert "rft" not in saved and "server" not in saved
    assert "seed" not in saved["sft"] and "output_dir" not in saved["dpo"]
    # Resumable from itself: the saved recipe is the same run.
    config = failure_run.parent / "saved.yaml"
    config.write_text((failure_run / "config.yaml").read_text())
    before = manifest_times(failure_run)
    execute(load(RunConfig, config), failure_run, quiet=True)
    assert manifest_times(failure_run) == before


def test_models_handed_on_in_memory_give_the_run_that_loading_them_gives(tmp_path, monkeypatch):
    from coevo.policy import hf
    from coevo.run.context import Run

    played_in_memory: list[bool] = []
    init = hf.HFPolicy.__init__

    def spy(self, path, *, model=None, **kw):
        played_in_memory.append(model is not None)
        init(self, path, model=model, **kw)

    monkeypatch.setattr(hf.HFPolicy, "__init__", spy)
    memory = execute(recipe(method="eto", iterations=1), tmp_path / "memory", quiet=True)
    # eval-0 and explore-1 play the SFT module, eval-1 the DPO one; nothing loaded again.
    assert played_in_memory == [True, True, True]
    hand_on = Run.hand_on
    monkeypatch.setattr(Run, "hand_on", lambda self, path, module=None: hand_on(self, path))
    disk = execute(recipe(method="eto", iterations=1), tmp_path / "disk", quiet=True)
    assert played_in_memory[3:] == [False, False, False]
    with Store(memory, create=False) as a, Store(disk, create=False) as b:
        assert [t.to_dict() for t in a.trajectories()] == [t.to_dict() for t in b.trajectories()]
        assert a.pairs() == b.pairs()
    for stage in ("sft-target", "dpo-1-target", "eval-1"):
        outputs = [json.loads((r / "stages" / stage / "manifest.json").read_text())["outputs"]
                   for r in (memory, disk)]  # fmt: skip
        for record in outputs:  # the one number that is a clock's
            record.get("final", {}).pop("tokens_per_s", None)
        assert outputs[0] == outputs[1]
    weights = "stages/dpo-1-target/model/model.safetensors"
    assert (memory / weights).read_bytes() == (disk / weights).read_bytes()


@contextmanager
def scope_of(config: RunConfig, run_dir: Path) -> Iterator[Scope]:
    """What a plan reads, for `config`'s run in `run_dir` (a fresh one: nothing done yet)."""
    pool = env_pool(config)
    try:
        yield Scope(Run(config, Pipeline(run_dir, recorded(config)), None, pool))  # type: ignore[arg-type]
    finally:
        pool.close()


def test_the_plan_names_the_stages_the_loop_runs_with_their_sizes(failure_run, tmp_path):
    config = recipe(method="failure_agent")
    plan = method("failure_agent").plan
    times = manifest_times(failure_run)
    with scope_of(config, tmp_path / "fresh") as fresh:
        planned = plan(fresh)
        assert [p.name for p in planned] == sorted(times, key=times.get)  # the loop's order
        sizes = {p.name: p for p in planned}
        assert (sizes["explore-2-failure"].units, sizes["eval-1"].units) == (16, 16)
        # Before the experts are played, SFT's size is a bound: 8 train tasks at most.
        assert (sizes["sft-target"].units, sizes["sft-target"].exact) == (16, False)
        assert not sizes["dpo-1-target"].exact  # its pairs are what exploration finds
        assert announce(fresh, planned)[0].endswith(": plan (failure_agent): 16 stages to run")
    with scope_of(config, failure_run) as finished:
        for p in plan(finished):
            did = measured(finished.outputs(p.name) or {})
            if did is None:  # not counted, or a DPO stage skipped for want of pairs
                assert p.work in ("", DPO)
            elif p.exact:
                assert did == (p.work, p.units)
            else:
                assert did[0] == p.work and did[1] <= p.units
        lines = announce(finished, plan(finished))
        assert lines == [f"{failure_run}: plan: all 16 stages finished before, nothing to run"]


def test_a_run_says_its_plan_the_time_left_and_what_did_not_learn(tmp_path, capsys):
    small = {
        "env": {**FAST["env"], "eval_tasks": 4},
        "sft": {**FAST["sft"], "epochs": 2},
        "explore": {**FAST["explore"], "samples": 1},
        "dpo": {**FAST["dpo"], "optim": {"lr": 0.0}},  # a DPO stage that cannot learn
    }
    run = execute(recipe(method="eto", iterations=1, **small), tmp_path / "eto", quiet=False)
    err = capsys.readouterr().err
    # Before the first stage: what it will run, by name and size.
    plan = err[err.index(f"{run}: plan (eto): 7 stages to run") : err.index("stage experts")]
    assert "  sft-target        SFT: up to 4 optimizer steps (2 epochs over up to 8 " in plan
    assert "  eval-0            8 episodes (test_seen 4, test_unseen 4), greedy" in plan
    assert "  explore-1-target  8 episodes (8 train tasks x 1 sample)" in plan
    assert "  dpo-1-target      DPO: up to 2 optimizer steps on the pairs exploration" in plan
    # Once a kind of work is timed: the time left, and what it cannot count yet.
    assert re.search(
        rf"{run}: about .+ left in 3 stages \(at this run's .+ s an episode\); "
        r"not counted: dpo-1-target",
        err,
    )
    # SFT moved the weights; DPO at lr 0 did not, and says so.
    assert f"{run}: stage sft-target: weights moved: largest change" in err
    assert f"{run}: stage dpo-1-target: the weights did not move (largest change 0" in err


def test_compare_reads_the_run(failure_run):
    tables = compare([failure_run])
    cells = tables["rows"]["failure_agent"]
    assert set(cells) == {"tests.toy_env:ToyEnv test_seen", "tests.toy_env:ToyEnv test_unseen"}
    assert set(tables["outcomes"]) == {"failure_agent / target", "failure_agent / failure"}


def test_rerun_skips_every_finished_stage(failure_run):
    before = manifest_times(failure_run)
    with Store(failure_run, create=False) as store:
        rows = (store.count("trajectories"), store.count("pairs"))
    execute(recipe(method="failure_agent"), failure_run, quiet=True)
    assert manifest_times(failure_run) == before
    with Store(failure_run, create=False) as store:  # nothing stored a second time
        assert (store.count("trajectories"), store.count("pairs")) == rows


def test_eto_starts_from_the_sft_run(tmp_path):
    sft_run = execute(recipe(method="sft"), tmp_path / "sft", quiet=True)
    eto_run = execute(
        recipe(method="eto", iterations=1, init_from=str(sft_run)), tmp_path / "eto", quiet=True
    )
    adopted = manifest_times(eto_run)
    assert {"experts", "model", "sft-target", "eval-0", "explore-1-target", "dpo-1-target"} <= set(
        adopted
    )
    # The SFT checkpoint is the SFT run's (linked, not retrained); finished training stages
    # keep their model and none of the states they would only have resumed from.
    for run in (sft_run, eto_run):
        assert not list(run.glob("stages/*/checkpoints"))
    ours = (eto_run / "stages/sft-target/model/model.safetensors").read_bytes()
    assert ours == (sft_run / "stages/sft-target/model/model.safetensors").read_bytes()
    with Store(eto_run, create=False) as store:
        assert len(store.trajectories(stage="experts")) == 8
    # Its stage lines say so (`adopted from`), not that this run did them before.
    manifest = json.loads((eto_run / "stages/sft-target/manifest.json").read_text())
    assert manifest["adopted_from"] == str(sft_run)
    with pytest.raises(Exception, match="other seed"):
        execute(recipe(method="eto", seed=5, init_from=str(sft_run)), tmp_path / "eto5", quiet=True)
    # Another thread count decides no result (a time setting): the same start.
    threads = {**FAST["model"], "cpu_threads": 2}
    two = execute(
        recipe(method="eto", iterations=0, model=threads, init_from=str(sft_run)),
        tmp_path / "two",
        quiet=True,
    )
    assert json.loads((two / "stages/sft-target/manifest.json").read_text())["adopted_from"]
    # A source saved by an earlier coevo lacks the keys added since: they have their defaults.
    saved = yaml.safe_load((sft_run / "config.yaml").read_text())
    del saved["eval"]["sampling"]["temperature"], saved["eval"]["sampling"]["top_p"]
    (sft_run / "config.yaml").write_text(yaml.safe_dump(saved))
    older = execute(
        recipe(method="eto", iterations=0, init_from=str(sft_run)), tmp_path / "older", quiet=True
    )
    assert json.loads((older / "stages/sft-target/manifest.json").read_text())["adopted_from"]


def test_eto_takes_the_first_target_exploration_from_a_failure_agent_run(failure_run, tmp_path):
    def explored(run: Path) -> list[dict]:
        with Store(run, create=False) as store:
            return [t.to_dict() for t in store.trajectories(stage="explore-1-target")]

    taken = execute(
        recipe(method="eto", iterations=1, init_from=str(failure_run)),
        tmp_path / "taken",
        quiet=True,
    )
    manifest = json.loads((taken / "stages/explore-1-target/manifest.json").read_text())
    assert manifest["adopted_from"] == str(failure_run)
    # What it adopts is what it would have played: ETO on its own plays the same episodes.
    own = execute(recipe(method="eto", iterations=1), tmp_path / "own", quiet=True)
    assert "adopted_from" not in json.loads(
        (own / "stages/explore-1-target/manifest.json").read_text()
    )
    assert explored(taken) == explored(own) == explored(failure_run)
    weights = "stages/dpo-1-target/model/model.safetensors"
    assert (taken / weights).read_bytes() == (own / weights).read_bytes()
    # Explored with other settings, or a method without DPO phases: the SFT start only.
    hotter = {**FAST["explore"], "sampling": {"temperature": 0.5}}
    for name, changes in {
        "hot": {"method": "eto", "explore": hotter},
        "rft": {"method": "rft"},
    }.items():
        run = execute(
            recipe(**changes, iterations=0, init_from=str(failure_run)), tmp_path / name, quiet=True
        )
        assert (run / "stages/sft-target/manifest.json").is_file()
        assert not (run / "stages/explore-1-target").exists()


def test_a_branch_takes_every_finished_stage_and_stops_where_asked(failure_run, tmp_path, capsys):
    """init_from a run of the same recipe with one more iteration: every finished stage of it
    is adopted, the source is left as it was, and the branch stops after the stages given."""
    before = manifest_times(failure_run)
    explored = ("explore-3-target", "explore-3-failure")
    config = recipe(method="failure_agent", iterations=3, init_from=str(failure_run))
    with pytest.raises(ConfigError, match=r"until: explore-9-target is not a stage of this run"):
        execute(config, tmp_path / "misspelt", quiet=True, until=("explore-9-target",))
    capsys.readouterr()
    branch = execute(config, tmp_path / "branch", until=explored)
    err = capsys.readouterr().err
    # The plan and the time left count only the stages up to those.
    assert f"{branch}: plan (failure_agent): 2 stages to run" in err and "dpo-3" not in err
    assert f"{branch}: stopped after explore-3-target, explore-3-failure, as asked" in err
    assert manifest_times(failure_run) == before
    times = manifest_times(branch)
    assert set(times) == {*before, *explored}  # stopped before DPO 3
    for stage in before:
        manifest = json.loads((branch / f"stages/{stage}/manifest.json").read_text())
        assert manifest["adopted_from"] == str(failure_run)
    with Store(branch, create=False) as ours, Store(failure_run, create=False) as theirs:
        for stage in ("explore-2-failure", "eval-2-test_seen"):
            mine = [t.to_dict() for t in ours.trajectories(stage=stage)]
            assert mine == [t.to_dict() for t in theirs.trajectories(stage=stage)]
        assert len(ours.trajectories(stage="explore-3-failure")) == 16  # 8 tasks x 2 samples


def test_a_finished_run_continues_with_more_iterations(tmp_path):
    from coevo.run.pipeline import RunDirError

    run = execute(recipe(method="eto", iterations=0), tmp_path / "run", quiet=True)
    before = manifest_times(run)
    execute(recipe(method="eto", iterations=1), run, quiet=True)
    after = manifest_times(run)
    assert all(after[name] == t for name, t in before.items())  # nothing finished was redone
    assert {"explore-1-target", "dpo-1-target", "eval-1"} <= set(after)
    assert yaml.safe_load((run / "config.yaml").read_text())["iterations"] == 1
    hotter = {**FAST["explore"], "sampling": {"temperature": 0.5}}
    with pytest.raises(RunDirError, match=r"explore.sampling.temperature \(1.0 -> 0.5\)"):
        execute(recipe(method="eto", iterations=1, explore=hotter), run, quiet=True)


def test_pretrain_warms_up_the_local_model_before_sft(tmp_path):
    from safetensors.torch import load_file

    run = execute(
        recipe(method="sft", model={**FAST["model"], "pretrain_epochs": 2}),
        tmp_path / "run",
        quiet=True,
    )
    stage = run / "stages/model"
    info = json.loads((stage / "manifest.json").read_text())["outputs"]["pretrain"]
    assert info["examples"] == 8 and info["steps"] == 4
    init, warm = (
        load_file(stage / "init/model.safetensors"),
        load_file(stage / "model/model.safetensors"),
    )
    assert init.keys() == warm.keys()
    assert all(not torch.equal(init[k], warm[k]) for k in init)  # every weight moved
    sft_stage = json.loads((run / "stages/sft-target/manifest.json").read_text())
    assert sft_stage["inputs"]["start"] == str(stage / "model")


def test_resume_after_kill_mid_iteration(tmp_path):
    """kill -9 while iteration 1 explores; the rerun keeps every committed trajectory."""
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump({**FAST, "method": "eto", "iterations": 1}))
    run = tmp_path / "run"
    committed = run_until_rows(
        config,
        run,
        "SELECT id, task, created FROM trajectories WHERE stage='explore-1-target'",
        timeout=240,
        # Right after the first committed episodes: the exploration has more to play.
        stop_at=("coevo.store:Store.add_trajectories", "stage=explore-1-target", "after"),
    )
    assert committed, "the run never reached exploration"
    assert not (run / "stages/explore-1-target/manifest.json").exists()
    before = manifest_times(run)

    execute(build(RunConfig, {**FAST, "method": "eto", "iterations": 1}), run, quiet=True)
    after = manifest_times(run)
    assert all(after[name] == t for name, t in before.items())  # nothing finished was redone
    with sqlite3.connect(run / "store.sqlite") as con:
        rows = con.execute(
            "SELECT id, task, created FROM trajectories WHERE stage='explore-1-target'"
        ).fetchall()
    assert set(committed) <= set(rows)  # nothing committed was lost
    with Store(run, create=False) as store:
        keys = [(t.task.id, t.sample) for t in store.trajectories(stage="explore-1-target")]
    assert len(keys) == len(set(keys)) == 16
    assert "eval-1" in after


def test_config_errors_name_themselves(tmp_path):
    config = tmp_path / "r.yaml"
    config.write_text("method: eto\nexplore:\n  sampling:\n    temprature: 0.5\n")
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert (
        "Unknown config key 'explore.sampling.temprature'. Did you mean "
        "'explore.sampling.temperature'?" in result.output
    )
    # The method is checked against the registry once the recipe has loaded.
    config.write_text("method: eto\n")
    result = CliRunner().invoke(
        app, ["run", str(config), "--out", str(tmp_path / "x"), "method=ppo"]
    )
    assert result.exit_code == 2 and "method must be one of" in result.output
    assert not (tmp_path / "x").exists()
    # A stage to stop after that the run does not have: refused before any stage runs.
    config.write_text(yaml.safe_dump({**FAST, "method": "sft"}))
    out = tmp_path / "y"
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(out), "--until", "eval-9"])
    assert result.exit_code == 2
    assert "until: eval-9 is not a stage of this run; its stages: experts, " in result.output
    assert not list(out.glob("stages/*/manifest.json"))


def test_ctrl_c_says_how_to_go_on(tmp_path, monkeypatch):
    from coevo.methods import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", interrupted)
    config = tmp_path / "r.yaml"
    config.write_text(yaml.safe_dump({**FAST, "method": "sft"}))
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 130
    assert result.output.strip() == "interrupted; rerun the same command to resume"


def test_a_run_ends_with_its_time_and_the_report_command(failure_run, tmp_path):
    from coevo.cli import duration

    config = tmp_path / "r.yaml"
    config.write_text(yaml.safe_dump({**FAST, "method": "failure_agent"}))
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(failure_run)])
    assert result.exit_code == 0, result.output
    assert "done before, skipped" in result.output  # every stage: a rerun of a finished run
    assert f"{failure_run}: done in " in result.output
    assert f"coevo report {failure_run}" in result.output
    assert [duration(s) for s in (42.4, 185, 7620)] == ["42 s", "3 min 05 s", "2 h 07 min"]


def test_the_base_method_evaluates_the_model_untrained(tmp_path):
    run = execute(recipe(method="base"), tmp_path / "base", quiet=True)
    assert set(manifest_times(run)) == {"model", "eval-0"}
    from coevo.analysis.compare import compare

    table = compare([run])
    # A row to compare SFT's gain with: the base method on both test splits, 8 tasks each.
    splits = {f"{FAST['env']['name']} {s}" for s in ("test_seen", "test_unseen")}
    assert set(table["rows"]["base"]) == splits
    assert all(table["episodes"]["base"][column] == 8 for column in splits)
    with Store(run, create=False) as store:
        assert {t.task.split for t in store.trajectories(stage="eval-0-test_seen")} == {"test_seen"}
        assert store.count("trajectories") == len(
            store.trajectories(stage="eval-0-test_seen")
        ) + len(store.trajectories(stage="eval-0-test_unseen"))


def test_sft_reports_its_loss_on_held_out_demonstrations(tmp_path, capsys):
    """With a validation slice, the SFT stage measures what it did to tasks it never saw: the
    loss on their demonstrations before training and after it."""
    env = {**FAST["env"], "train_tasks": 5, "valid_tasks": 3}
    run = execute(recipe(method="sft", env=env), tmp_path / "sft", quiet=False)
    with Store(run, create=False) as store:
        held_out = store.trajectories(stage="experts-valid")
        trained_on = {t.task.id for t in store.trajectories(stage="experts")}
    assert len(held_out) == 3 and not {t.task.id for t in held_out} & trained_on
    manifest = json.loads((run / "stages/sft-target/manifest.json").read_text())
    before, after = manifest["outputs"]["held_out_loss"]
    assert after < before  # the toy tasks share their form: SFT carries over
    assert manifest["inputs"]["held_out"] == 3
    metrics = [json.loads(line) for line in (run / "stages/sft-target/metrics.jsonl").open()]
    assert metrics[0] == {"step": 0, "epoch": 0, "eval_loss": before}
    said = capsys.readouterr().err
    assert f"loss on 3 held-out demonstrations {before:.3f} -> {after:.3f}" in said
    # Without a validation slice there is nothing held out, and nothing to say.
    assert "experts-valid  held-out demonstrations of 3 valid tasks" in said  # in its plan
    plain = execute(recipe(method="sft"), tmp_path / "plain", quiet=True)
    manifest = json.loads((plain / "stages/sft-target/manifest.json").read_text())
    assert manifest["outputs"].get("held_out_loss") is None
