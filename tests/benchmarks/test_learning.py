"""benchmarks/learning.py's budget-matched ETO: the failure-agent target's DPO steps, read from
its run or archive."""

from __future__ import annotations

import importlib
import json
from argparse import Namespace
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def learning(monkeypatch, tmp_path):
    """The script as a module, its archive folder moved to tmp_path/archive."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = importlib.import_module("learning")
    monkeypatch.setattr(module, "ARCHIVE", tmp_path / "archive")
    return module


def failure_agent_run(root: Path, steps: dict[str, int]) -> Path:
    """A failure_agent run folder whose DPO stages (name -> steps) have finished."""
    (root / "config.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text("method: failure_agent\n")
    for stage, n in steps.items():
        (root / "stages" / stage).mkdir(parents=True)
        outputs = {"kind": "dpo", "steps": n, "pairs": 8 * n}
        (root / "stages" / stage / "manifest.json").write_text(json.dumps({"outputs": outputs}))
    return root


def test_matched_steps_are_the_target_s_dpo_steps(learning, tmp_path):
    # The failure agent's own DPO does not count; the target's 15 steps do.
    one = failure_agent_run(tmp_path / "a", {"dpo-1-failure": 40, "dpo-1-target": 15})
    assert learning.matched_steps(one) == 15
    # Two iterations of 15 and 16 steps: each of ETO's stages gets ceil(31 / 2) = 16.
    two = failure_agent_run(tmp_path / "b", {"dpo-1-target": 15, "dpo-2-target": 16})
    assert learning.matched_steps(two) == 16
    # A DPO skipped for want of pairs (0 steps) is not a budget.
    skipped = failure_agent_run(tmp_path / "c", {"dpo-1-target": 0})
    with pytest.raises(SystemExit, match="run that seed's failure_agent first"):
        learning.matched_steps(skipped)
    with pytest.raises(SystemExit, match="no run"):
        learning.matched_steps(None)


def test_an_eto_matched_run_is_eto_with_those_steps(learning, tmp_path):
    failure_agent_run(tmp_path / "archive" / "shop" / "failure_agent-s1", {"dpo-1-target": 15})
    args = Namespace(
        sizes="machine", overrides=[], out=tmp_path / "runs", archive=tmp_path / "archive"
    )
    config = learning.recipe(args, "shop", "eto_matched", 1)
    assert (config.method, config.name, config.seed) == ("eto", "eto_matched", 1)
    assert config.dpo.steps == 15
    assert config.dpo.epochs == 1  # the machine sizes still apply; steps take their place
    assert learning.recipe(args, "shop", "eto", 1).dpo.steps is None


PLAIN = {"device": "cpu", "out": None, "sizes": None, "overrides": []}
"""A grid's options left at their defaults."""


def test_a_report_defaults_to_every_archived_run(learning, tmp_path):
    for name in ("shop/sft-s1", "shop/eto_matched-s3", "shop/failure_agent-s3", "sql/rft-s2"):
        (tmp_path / "archive" / name).mkdir(parents=True)
    args = Namespace(envs=None, methods=None, seeds=None, report_only=True, **PLAIN)
    learning.defaults(args)
    assert args.envs == ["shop", "sql"]
    assert args.seeds == [1, 2, 3]
    # SFT first, eto_matched after failure_agent, whose steps it reads.
    assert args.methods == ["sft", "rft", "failure_agent", "eto_matched"]
    # A grid to run: its own defaults, whatever the archive holds.
    grid = Namespace(
        envs=None, methods=["eto_matched", "failure_agent"], seeds=None, report_only=False, **PLAIN
    )
    learning.defaults(grid)
    assert (grid.envs, grid.seeds) == (["shop", "sql"], [0, 1, 2])
    assert grid.methods == ["sft", "failure_agent", "eto_matched"]


def test_the_gpu_grid_has_the_paper_sizes_and_results_of_its_own(learning, tmp_path):
    args = Namespace(
        device="cuda", report_only=True, out=None, sizes=None, envs=None, methods=None,
        seeds=None, overrides=["sft.epochs=1"],
    )  # fmt: skip
    learning.defaults(args)
    assert args.results.name == "learning-cuda.md"
    assert args.archive.name == "archive-cuda" and args.out.name == "learning-cuda"
    assert args.sizes == "paper"
    args.seeds = None
    args.report_only = False
    import torch

    if not torch.cuda.is_available():  # a grid that would run needs the GPU it names
        with pytest.raises(SystemExit, match="--device cuda needs a CUDA GPU"):
            learning.defaults(args)
    config = learning.recipe(args, "shop", "eto", 4)
    assert (config.env.eval_tasks, config.env.train_tasks, config.iterations) == (200, None, 3)
    assert config.model.device == "cuda" and config.sft.epochs == 1  # the overrides come last
    # DPO compiled always; SFT as `auto` decides (compiled on the GPU at these sizes)
    assert config.dpo.compute.compile is True and config.sft.compute.compile == "auto"
    cpu = Namespace(**{**vars(args), "device": "cpu", "sizes": None, "out": None, "seeds": None})
    cpu.report_only = True
    learning.defaults(cpu)
    assert cpu.results.name == "learning.md" and cpu.archive.name == "archive"
    assert cpu.sizes == "machine" and cpu.seeds == []  # the (empty) archive's seeds


def test_the_agent_data_rows_are_agent_data_with_their_explorer(learning, tmp_path):
    args = Namespace(sizes="machine", overrides=[], out=tmp_path / "runs", archive=tmp_path)
    for kind in ("random", "guided"):
        config = learning.recipe(args, "sql", f"agent_data_{kind}", 2)
        assert (config.method, config.name, config.seed) == ("agent_data", f"agent_data_{kind}", 2)
        assert config.agent_data.explorer.kind == kind
        # The GRPO sizes of the machine grid apply, as to grpo's row.
        assert config.grpo.steps == learning.recipe(args, "sql", "grpo", 2).grpo.steps == 8
        # Their steps before the first round are taken from a sibling: its checkpoint is kept.
        assert config.grpo.checkpoints.keep_stage_ends
    assert not learning.recipe(args, "sql", "eto", 2).sft.checkpoints.keep_stage_ends


def test_the_ablations_are_the_guided_row_with_one_signal_or_no_verification(learning, tmp_path):
    from coevo.analysis.paired import CONTRASTS

    args = Namespace(sizes="machine", overrides=[], out=tmp_path / "runs", archive=tmp_path)
    guided = learning.recipe(args, "shop", "agent_data_guided", 1)
    for signal in ("forgetting", "boundary", "rare"):
        config = learning.recipe(args, "shop", f"agent_data_{signal}", 1)
        assert (config.method, config.name) == ("agent_data", f"agent_data_{signal}")
        assert config.agent_data.explorer.kind == "guided"
        assert config.agent_data.signals == [signal] != guided.agent_data.signals
        assert config.agent_data.verify and config.grpo == guided.grpo
    unverified = learning.recipe(args, "shop", "agent_data_unverified", 1)
    assert unverified.agent_data.verify is False and guided.agent_data.verify is True
    assert unverified.agent_data.signals == guided.agent_data.signals
    # Each is compared with the row it ablates, and every contrast names a row the grid runs.
    ablations = {m for m, r in CONTRASTS if r == "agent_data_guided"}
    assert ablations == {f"agent_data_{a}" for a in ("forgetting", "boundary", "rare")}
    assert ("agent_data_guided", "agent_data_unverified") in CONTRASTS
    assert ablations | {"agent_data_unverified"} <= set(learning.ORDER)


def test_bfcl_has_machine_sizes_that_its_recipes_take(learning, tmp_path):
    args = Namespace(sizes="machine", overrides=[], out=tmp_path / "runs", archive=tmp_path)
    sft = learning.recipe(args, "bfcl", "sft", 0)
    assert (sft.env.name, sft.env.train_tasks, sft.env.valid_tasks) == ("bfcl", 64, 24)
    assert sft.eval.splits == ["valid", "test_seen", "test_unseen"] and sft.iterations == 1
    # A shorter turn budget than BFCL's, the recipe's other options kept.
    assert sft.env.options == {"docs": "signatures", "max_result_chars": 1000, "max_steps": 6}
    for method in ("grpo", "agent_data_random", "agent_data_guided"):
        config = learning.recipe(args, "bfcl", method, 0)
        assert (config.grpo.steps, config.grpo.micro_batch_size) == (4, 1)
        assert config.agent_data.synthesis_every == 2
    assert "bfcl" in learning.ENVS  # a report lists it after the paper's other envs


def test_a_misspelt_method_or_override_is_refused_before_any_run(learning, tmp_path):
    def grid(envs, methods, overrides=()):
        return Namespace(
            envs=envs,
            methods=["sft", *methods],
            seeds=[0],
            sizes="machine",
            overrides=list(overrides),
            out=tmp_path / "runs",
            archive=tmp_path,
        )

    learning.check_grid(grid(["sql"], ["grpo", "agent_data_rare", "eto_matched"]))  # all load
    learning.check_grid(grid(["bfcl"], ["grpo", "agent_data_unverified"]))
    with pytest.raises(SystemExit, match="No sql recipe for method 'agent_data_typo'.*grid's"):
        learning.check_grid(grid(["sql"], ["agent_data_typo"]))
    # bfcl has the GRPO recipes only (configs/bfcl/).
    with pytest.raises(SystemExit, match="No bfcl recipe for method 'eto_matched'"):
        learning.check_grid(grid(["bfcl"], ["eto_matched"]))
    with pytest.raises(SystemExit, match="sql sft: .*grpo.stepz"):
        learning.check_grid(grid(["sql"], ["grpo"], ["grpo.stepz=3"]))
    assert not (tmp_path / "runs").exists()  # nothing ran
