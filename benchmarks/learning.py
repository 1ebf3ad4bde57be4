"""Learning benchmark: SFT, RFT, ETO, failure-agent, GRPO and agent-data on shop, sql, sciworld
and bfcl, several seeds.

    python benchmarks/learning.py                                  # the grid, machine sizes
    python benchmarks/learning.py --envs shop --seeds 1 2          # resumes, archives
    python benchmarks/learning.py --envs sql --methods grpo agent_data --seeds 0
    python benchmarks/learning.py --sizes recipes --envs shop -- iterations=2   # recipe sizes
    python benchmarks/learning.py --envs shop --methods eto_matched --seeds 1 2  # matched ETO
    python benchmarks/learning.py --envs sql --methods grpo agent_data_guided agent_data_random
    python benchmarks/learning.py --envs bfcl --methods sft grpo agent_data_random --seeds 0
    python benchmarks/learning.py --report-only                  # tables of every archived run
    python benchmarks/learning.py --device cuda --envs shop --seeds 0 1  # the GPU grid

The recipes run the pretrained SmolLM2-135M-Instruct (`model.name: smollm2-135m`). By default
each env's runs get the sizes the grid of benchmarks/results/learning.md was measured at on a
2-core machine (`MACHINE_SIZES`; `--sizes recipes` runs the recipes as they are, for a GPU
machine); overrides after `--` come last and win. Sizes and overrides are written into the
results with the commit.

`--device cuda` runs the GPU grid: the papers' sizes (`--sizes paper`: the recipes as they are,
i.e. every train task and 3 iterations, with 200 test tasks per split) on the GPU, DPO's layers
compiled (`dpo.compute.compile=true`), seeds 0-9 by default, in runs/learning-cuda; its tables
go to benchmarks/results/learning-cuda.md and its archives to
benchmarks/results/learning-runs-cuda/, never mixed with the CPU grid's. Each run is archived as
soon as it finishes, so a grid spread over several machines (or cut off) loses only the run in
progress: rerun the same command with the archive in place and it goes on.

Each (env, seed) first runs SFT; every other method (RFT, ETO, failure-agent, GRPO, agent_data)
starts from that SFT policy
(`init_from`), as the paper's methods share one SFT start; ETO and failure-agent take it from a
sibling run that has already explored the same tasks alike, adopting that first exploration
too (`start_from`); likewise each agent_data row takes the GRPO steps before its first round
(and their evaluation) from a sibling that trained them alike, `grpo` or another agent_data
row, with the trainer's checkpoint there (`KEEP_STAGE_ENDS`). `eto_matched` is ETO given the failure-agent target's DPO budget: an ETO
run (configs/<env>/eto.yaml) whose `dpo.steps` is the step count of the target DPO of the
failure_agent run of its env and seed (`matched_steps`; that run must have finished its DPO,
here or in the archive), so that "failure-agent > ETO" can be told from "more DPO".
`agent_data_random` and `agent_data_guided` are agent_data with that explorer
(`agent_data.explorer.kind`: uniform over the env's valid actions, or steered by the round's
signals), the rows that compare with `grpo` (issue 38); the guided row's ablations are
`agent_data_forgetting`, `agent_data_boundary` and `agent_data_rare` (that signal alone) and
`agent_data_unverified` (no verification), each compared with `agent_data_guided`. Runs go to
`--out/<env>/<method>-s<seed>`
and resume when the script is rerun; each run's archive (`coevo archive`: config, manifests,
logs, per-task eval rewards) goes to benchmarks/results/learning-runs/<env>/, and
`--report-only` tabulates a run's archive where it got further than the run folder (a fresh
clone has none); without --envs, --methods or --seeds it tabulates every archived one.

`--table2` makes the paper's Table 2 (hard-negative shares after DPO) from the grid's
one-iteration runs: for each env and seed, a branch of the finished failure_agent and eto runs
(`init_from` a run of the same recipe with one more iteration adopts all its stages, leaving it
as it was) that stops once its explorations of that iteration are stored (`execute(until=)`),
in `--out/<env>/table2/`, archived to learning-runs/<env>/table2/; the Table 2 verdict reads
them, the score tables do not (their scores are their sources'). The
tables (the paper's Table 3 and Table 2 layouts, the paired tests), the null cells (SFT against
itself at two seeds: the noise floor), a verdict per paper claim with the smallest difference
the grid could have detected (`coevo.analysis.claims`) and the wall time of every run are
written to benchmarks/results/learning.md, keeping its hand-written summary (above the tables)
and notes (what was tried, below them) between their markers.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import yaml
from machine import check_device, describe, results_file

from coevo.analysis.archive import archive, finished_stages
from coevo.analysis.claims import claims, claims_markdown
from coevo.analysis.compare import compare, to_markdown
from coevo.analysis.null import null_cells, null_markdown
from coevo.analysis.paired import SIGNAL_ABLATIONS
from coevo.analysis.runs import read_runs
from coevo.config import ConfigError, load
from coevo.methods.runner import SHARED_STAGES, adoptable, execute
from coevo.run.console import quiet_libraries
from coevo.run.recipe import GRPO_METHODS, RunConfig

ROOT = Path(__file__).resolve().parents[1]
# Each grid run's archive (config, manifests, logs, per-task eval rewards; no weights or
# episodes), committed with the tables so that a fresh clone can tabulate the grid again.
ARCHIVE = ROOT / "benchmarks" / "results" / "learning-runs"
# Hand-written parts of learning.md that a rewrite keeps: a summary above the tables (the grid
# across sessions, runs whose stores were lost included) and the notes below them.
SUMMARY = ("<!-- summary:begin -->", "<!-- summary:end -->")
NOTES = ("<!-- notes:begin -->", "<!-- notes:end -->")
# ETO with the failure-agent target's number of DPO optimizer steps (`matched_steps`).
MATCHED = "eto_matched"
# The papers' sizes on top of the recipes (which already train on every task, 3 iterations):
# 200 test tasks per split (WebShop's test set; ScienceWorld's and InterCode's are cut to it).
PAPER = ("env.eval_tasks=200",)
# The grid's methods when it runs with no --methods, and the order a report lists them in.
METHODS = ("sft", "rft", "eto", "failure_agent")
# Grid methods that are a recipe's method with settings of their own: name -> (the recipe's
# method, its overrides).
VARIANTS = {
    "agent_data_random": ("agent_data", ("agent_data.explorer.kind=random",)),
    "agent_data_guided": ("agent_data", ("agent_data.explorer.kind=guided",)),
    # The paper's ablations of the guided row: one signal alone, and no verification.
    **{
        f"agent_data_{signal}": (
            "agent_data",
            ("agent_data.explorer.kind=guided", f"agent_data.signals=[{signal}]"),
        )
        for signal in SIGNAL_ABLATIONS
    },
    "agent_data_unverified": (
        "agent_data",
        ("agent_data.explorer.kind=guided", "agent_data.verify=false"),
    ),
}
ORDER = (
    *METHODS, MATCHED, "positive_agent", "frozen_failure", "grpo", "agent_data", *VARIANTS
)  # fmt: skip
ENVS = ("shop", "sql", "sciworld", "bfcl")
"""The order a report lists the envs in (others after them, by name)."""


# The sizes the grid was measured at on 2 CPU cores (from the fifteenth session on, one run at a
# time on both cores; before it, two at once on one thread each: the thread count is a time
# setting, equal results up to float rounding):
# the splits and budgets every env shares, then per env its task counts and what its runs
# add, GRPO's settings for the GRPO methods only (a run's config must stay the same to resume).
COMMON = (
    "eval.splits=[valid,test_seen,test_unseen]",
    "sft.epochs=2",
    "model.cpu_threads=2",
    "iterations=1",
    "rft.samples=2",
)
TASKS = ("env.train_tasks=64", "env.valid_tasks=40", "env.eval_tasks=50")
MACHINE_SIZES = {
    "sql": (*TASKS, *COMMON, "dpo.epochs=2", "dpo.compute.gradient_checkpointing=true"),
    "shop": (*TASKS, *COMMON, "dpo.epochs=1", "sft.compute.gradient_checkpointing=true"),
    "sciworld": (
        *COMMON,
        "dpo.epochs=1",
        "env.train_tasks=48",
        "env.valid_tasks=24",
        "env.eval_tasks=30",
        "env.options.max_steps=20",
        "eval.batch_size=16",
        "explore.batch_size=16",
        "sft.compute.gradient_checkpointing=true",
    ),
    # BFCL multi-turn: 150 train entries (of which valid_tasks are held out), 50 test_seen, 150
    # test_unseen; an expert episode is about 1,900 tokens at the median (configs/bfcl/base.yaml).
    # A turn's budget is 6 actions, not BFCL's 21: the expert takes 2 (its calls, then the
    # answer), and a turn that the agent never answers, the 135M SFT model's usual failure,
    # cost 21 replies of up to 160 tokens (2 min 42 s an episode at batch 4 on one thread).
    "bfcl": (
        *COMMON,
        "dpo.epochs=1",
        "env.train_tasks=64",
        "env.valid_tasks=24",
        "env.eval_tasks=30",
        "env.options.max_steps=6",
        "eval.batch_size=16",
        "explore.batch_size=16",
    ),
}
# A GRPO run keeps its trainer's checkpoint at each interval's end, so that its siblings of
# the same seed (grpo, each agent_data row) adopt the steps they would play alike, up to the
# first agent-data round, instead of training them again (`coevo.methods.runner.grpo_prefix`).
KEEP_STAGE_ENDS = "grpo.checkpoints.keep_stage_ends=true"
MACHINE_GRPO = {
    "sql": (
        "grpo.steps=8",
        "grpo.eval_every=4",
        "grpo.tasks_per_step=4",
        "grpo.samples=8",
        "grpo.rollout_batch_size=32",
        "grpo.micro_batch_size=4",
        "grpo.optim.lr=1e-5",
        "agent_data.synthesis_every=4",
    ),
    "shop": (
        "grpo.steps=4",
        "grpo.eval_every=2",
        "grpo.tasks_per_step=4",
        "grpo.samples=4",
        "grpo.rollout_batch_size=16",
        "grpo.micro_batch_size=2",
        "grpo.compute.gradient_checkpointing=true",
        "grpo.optim.lr=1e-5",
        "agent_data.synthesis_every=2",
    ),
    "bfcl": (
        "grpo.steps=4",
        "grpo.eval_every=2",
        "grpo.tasks_per_step=4",
        "grpo.samples=4",
        "grpo.rollout_batch_size=16",
        "grpo.micro_batch_size=1",
        "grpo.optim.lr=1e-5",
        "agent_data.synthesis_every=2",
    ),
}


def sizes(args: argparse.Namespace, env: str, method: str) -> list[str]:
    """The overrides of one run: the machine sizes of its env (unless `--sizes recipes`), then
    the command line's."""
    preset: tuple[str, ...] = ()
    if args.sizes == "machine":
        preset = MACHINE_SIZES.get(env, (*TASKS, *COMMON))
        if VARIANTS.get(method, (method,))[0] in GRPO_METHODS:
            preset += MACHINE_GRPO.get(env, ())
    elif args.sizes == "paper":
        preset = PAPER
    if VARIANTS.get(method, (method,))[0] in GRPO_METHODS:
        preset += (KEEP_STAGE_ENDS,)
    if getattr(args, "device", "cpu") == "cuda":
        # DPO's layers compiled: 2.95x TRL's tokens/s against 1.13x eager on an H100
        # (benchmarks/results/dpo_speed-cuda.md), for about 90 s of compiling per DPO stage.
        preset += ("model.device=cuda", "dpo.compute.compile=true")
    return [*preset, *args.overrides]


STAGE_KINDS = ("model", "sft", "explore", "dpo", "grpo", "evolve", "eval")


def stage_minutes(run_dir: Path) -> dict[str, float]:
    """Minutes the run's own stages took by kind (sft, explore, dpo, eval, ...), from their
    manifests (so a resumed grid still reports them); stages adopted from another run
    (`init_from`) are not counted."""
    minutes: dict[str, float] = dict.fromkeys(STAGE_KINDS, 0.0)
    for path in (run_dir / "stages").glob("*/manifest.json"):
        manifest = json.loads(path.read_text())
        if manifest.get("adopted_from"):
            continue
        kind = (manifest.get("outputs") or {}).get("kind") or path.parent.name.split("-")[0]
        minutes[kind] = minutes.get(kind, 0.0) + manifest.get("seconds", 0.0) / 60
    return minutes


def start_from(run_dir: Path, sft_dir: Path, config: RunConfig) -> Path:
    """The run `run_dir` adopts its start from: the one it was made with; for a new run, a
    sibling (same env and seed) from which it would adopt more than the SFT start, finished
    (the target's first exploration, for ETO and the failure-agent methods:
    `coevo.methods.runner.FIRST_EXPLORATION`; the GRPO intervals before the first round, for
    agent_data: `coevo.methods.runner.grpo_prefix`); else the SFT run."""
    saved = run_dir / "config.yaml"
    if saved.is_file():
        return Path((yaml.safe_load(saved.read_text()) or {}).get("init_from") or sft_dir)
    for sibling in sorted(run_dir.parent.glob(f"*-s{config.seed}")):
        if sibling in (run_dir, sft_dir) or not (sibling / "config.yaml").is_file():
            continue
        differ, stages = adoptable(sibling, config)
        extra = [stage for stage in stages if stage not in SHARED_STAGES]
        if (
            not differ
            and extra
            and all((sibling / "stages" / stage / "manifest.json").is_file() for stage in extra)
        ):
            return sibling
    return sft_dir


def further(run_dir: Path, kept: Path) -> Path | None:
    """What to tabulate of one grid cell: the run, or its archive where the archive got further
    (the run folder of a fresh clone is empty or starting over); None if neither exists."""
    found = [path for path in (run_dir, kept) if (path / "config.yaml").is_file()]
    return max(found, key=finished_stages) if found else None


def archived(args: argparse.Namespace, run_dir: Path, kept: Path) -> Path | None:
    """The grid cell to tabulate (`further`), archived to `kept` first where the run got
    further than its archive (unless --no-write); None if neither exists."""
    found = further(run_dir, kept)
    if found is not None and found != kept and not args.no_write:
        archive(found, kept)
    return found


def matched_steps(run_dir: Path | None) -> int:
    """The DPO optimizer steps the failure_agent run `run_dir` (a run or its archive) gave its
    target, per DPO stage: from its `dpo-<i>-target` manifests, their mean rounded up where
    there are several (iterations > 1), so that ETO's stages add up to at least as many."""
    stages = sorted(run_dir.glob("stages/dpo-*-target/manifest.json")) if run_dir else []
    steps = [json.loads(path.read_text())["outputs"].get("steps") for path in stages]
    steps = [n for n in steps if isinstance(n, int) and n > 0]
    if not steps:
        raise SystemExit(
            f"{MATCHED} takes its DPO steps from the failure_agent run of its env and seed, which "
            f"has no finished target DPO yet ({run_dir or 'no run'}): run that seed's "
            "failure_agent first (--methods failure_agent)."
        )
    return math.ceil(sum(steps) / len(steps))


def recipe(args: argparse.Namespace, env: str, method: str, seed: int) -> RunConfig:
    """The config of one grid run: its method's recipe with the run's overrides; an
    `eto_matched` run is ETO named so, with the failure-agent target's DPO steps."""
    overrides = [f"seed={seed}", *sizes(args, env, method)]
    if method == MATCHED:
        runs = (
            args.out / env / f"failure_agent-s{seed}",
            args.archive / env / f"failure_agent-s{seed}",
        )
        steps = matched_steps(further(*runs))
        overrides = [f"name={MATCHED}", f"dpo.steps={steps}", *overrides]
        method = "eto"
    elif method in VARIANTS:
        base, own = VARIANTS[method]
        overrides = [f"name={method}", *own, *overrides]
        method = base
    return load(RunConfig, ROOT / "configs" / env / f"{method}.yaml", overrides)


# Table 2's branches: folder, and the method -> the agents whose explorations it compares.
TABLE2 = "table2"
TABLE2_AGENTS = {"failure_agent": ("target", "failure"), "eto": ("target",)}


def run_table2(args: argparse.Namespace) -> tuple[list[Path], list[str]]:
    """Table 2's branches of the grid's envs and seeds (`--table2` runs them; otherwise they
    are tabulated as far as they got): each a finished failure_agent or eto run with one more
    iteration, stopped after that iteration's explorations."""
    dirs, timings = [], []
    for env in args.envs:
        for seed in args.seeds:
            for method, agents in TABLE2_AGENTS.items():
                source = args.out / env / f"{method}-s{seed}"
                run_dir = args.out / env / TABLE2 / source.name
                kept = args.archive / env / TABLE2 / source.name
                if args.table2 and not args.report_only:
                    branch(args, env, method, seed, source, run_dir, agents)
                found = archived(args, run_dir, kept)
                if found is None:
                    continue
                total = sum(stage_minutes(found).values())
                timings.append(f"| {env} | {method} ({TABLE2}) | {seed} | {total:.1f} |")
                dirs.append(found)
    return dirs, timings


def branch(
    args: argparse.Namespace,
    env: str,
    method: str,
    seed: int,
    source: Path,
    run_dir: Path,
    agents: tuple[str, ...],
) -> None:
    """Run one Table 2 branch of `source`, unless the source is not finished (said, skipped)."""
    config = recipe(args, env, method, seed)
    if not (source / "stages" / f"eval-{config.iterations}" / "manifest.json").is_file():
        print(f"{env} {method} seed {seed}: no finished run at {source}, no Table 2 branch")
        return
    n = config.iterations + 1
    config = replace(config, iterations=n, init_from=str(source))
    differ, stages = adoptable(source, config)
    done = {path.parent.name for path in (source / "stages").glob("*/manifest.json")}
    if differ or not done <= set(stages):
        # Not a branch (its recipe differs from the grid's now): it would train anew.
        raise SystemExit(
            f"{source} was run with another recipe than the grid's now ({', '.join(differ)}); "
            "its Table 2 branch would not go on from it."
        )
    execute(config, run_dir, until=[f"explore-{n}-{agent}" for agent in agents])


def run_grid(args: argparse.Namespace) -> tuple[list[Path], list[str]]:
    dirs, timings = [], []
    for env in args.envs:
        for seed in args.seeds:
            sft_dir = args.out / env / f"sft-s{seed}"
            for method in args.methods:
                run_dir = args.out / env / f"{method}-s{seed}"
                kept = args.archive / env / run_dir.name
                if not args.report_only and not args.table2:
                    config = recipe(args, env, method, seed)
                    if method != "sft":
                        source = start_from(run_dir, sft_dir, config)
                        config = replace(config, init_from=str(source))
                    execute(config, run_dir)
                run_dir = archived(args, run_dir, kept)
                if run_dir is None:
                    continue  # not started yet
                minutes = stage_minutes(run_dir)
                total = sum(minutes.values())
                kinds = " | ".join(f"{minutes.get(k, 0.0):.1f}" for k in STAGE_KINDS)
                timings.append(f"| {env} | {method} | {seed} | {kinds} | {total:.1f} |")
                print(f"{env} {method} seed {seed}: {total:.1f} min", flush=True)
                dirs.append(run_dir)
    return dirs, timings


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def described_sizes(args: argparse.Namespace) -> str:
    """The overrides the grid's runs got, per env (and the GRPO methods' extra ones)."""
    if args.sizes != "machine":
        preset = " ".join(sizes(args, args.envs[0], "sft")) if args.envs else ""
        return f"{args.sizes} sizes; overrides {preset or '(none)'}"
    parts = []
    for env in args.envs:
        parts.append(f"{env}: {' '.join(sizes(args, env, 'sft'))}")
        grpo = [m for m in args.methods if VARIANTS.get(m, (m,))[0] in GRPO_METHODS]
        if grpo and MACHINE_GRPO.get(env):
            parts.append(f"{env} {'/'.join(grpo)} also: {' '.join(MACHINE_GRPO[env])}")
    return "overrides (machine sizes) " + "; ".join(parts)


def kept(old: str, markers: tuple[str, str], empty: str) -> str:
    """The block between `markers` in the old results, markers included (`empty` if none)."""
    found = re.search(re.escape(markers[0]) + r".*?" + re.escape(markers[1]), old, re.DOTALL)
    return found.group(0) if found else f"{markers[0]}\n{empty}\n{markers[1]}"


def tables(dirs: list[Path], branches: list[Path]) -> tuple[str, str]:
    """(the verdicts per paper claim and the null cells, the compare tables) of `dirs`, with
    Table 2's `branches` for its verdict."""
    runs, _ = read_runs(list(dirs))
    table2 = read_runs(list(branches))[0] if branches else []
    null = null_cells(runs)
    verdicts = "\n\n".join(
        part for part in (claims_markdown(claims(runs, null, table2)), null_markdown(null)) if part
    )
    return verdicts + "\n", to_markdown(compare(dirs))


def write_results(
    args: argparse.Namespace,
    dirs: list[Path],
    timings: list[str],
    made: tuple[str, str],
    branch_timings: list[str],
) -> None:
    old = args.results.read_text() if args.results.exists() else ""
    summary = kept(old, SUMMARY, "(no summary yet)")
    notes = kept(old, NOTES, "(no notes yet)")
    text = "\n".join(
        [
            "# Learning benchmark",
            "",
            f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {describe(args.device)} (at the end); "
            f"commit {commit()}.",
            f"Grid: envs {' '.join(args.envs)}; methods {' '.join(args.methods)}; seeds "
            f"{' '.join(map(str, args.seeds))}; {described_sizes(args)}.",
            "Recipes: configs/<env>/<method>.yaml. Scores are the last finished iteration's "
            "greedy evaluation, x100"
            + (
                " (tabulated with --report-only: runs as far as they got; the per-iteration "
                "table shows where each stopped)."
                if args.report_only
                else "."
            ),
            "",
            summary,
            "",
            "## Verdict per paper claim, and the null cells",
            "",
            made[0],
            "## Tables of the runs tabulated here",
            "",
            made[1],
            "### Wall time per run and stage kind (minutes, from the stage manifests; a run's "
            "stages adopted from another run, such as the shared SFT start, are not counted; a "
            "stage resumed across processes counts all its attempts when its manifest says how "
            "many, only its last one before that)",
            "",
            "| env | method | seed | " + " | ".join(STAGE_KINDS) + " | total |",
            "| --- | --- | --- |" + " --- |" * (len(STAGE_KINDS) + 1),
            *timings,
            "",
            *(
                [
                    "Table 2's branches (`--table2`): minutes of their own stages (the "
                    "explorations after one more DPO each)",
                    "",
                    "| env | method | seed | total |",
                    "| --- | --- | --- | --- |",
                    *branch_timings,
                    "",
                ]
                if branch_timings
                else []
            ),
            "## Notes",
            "",
            notes,
            "",
        ]
    )
    args.results.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", help="default: shop sql (reports: all archived)")
    parser.add_argument(
        "--methods", nargs="+", help=f"default: {' '.join(METHODS)} (reports: all archived)"
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, help="default: 0 1 2 (reports: all archived)"
    )
    parser.add_argument(
        "--out", type=Path, help="where the runs go (default: runs/learning, runs/learning-cuda)"
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: the GPU grid (paper sizes, seeds 0-9, results and archives of its own)",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="Print only: write neither tables nor archives."
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="Run nothing: tabulate the runs of the grid as far as they got (finished stages).",
    )
    parser.add_argument(
        "--table2",
        action="store_true",
        help="Run Table 2's branches (each finished failure_agent and eto run of the grid's "
        "envs and seeds, one more iteration, up to its explorations) instead of the grid.",
    )
    parser.add_argument(
        "--sizes",
        choices=("machine", "recipes", "paper"),
        help="machine (default on cpu): each env at the sizes the recorded grid ran at on 2 CPU "
        "cores; recipes: the recipes as they are; paper (default on cuda): the recipes with "
        "200 test tasks per split.",
    )
    parser.add_argument(
        "overrides", nargs="*", help="Recipe overrides for every run (key=value), applied last."
    )
    args = parser.parse_args()
    defaults(args)
    if not args.report_only:
        check_grid(args)
    quiet_libraries()  # coevo's own stage lines only, as the `coevo` command prints
    dirs, timings = run_grid(args)
    branches, branch_timings = run_table2(args)
    made = tables(dirs, branches)
    print("\n".join(made))
    if not args.no_write:
        write_results(args, dirs, timings, made, branch_timings)


def check_grid(args: argparse.Namespace) -> None:
    """Every run's recipe loads with the grid's sizes and overrides, before the first stage: a
    misspelt method or override is refused now, not after an SFT run (SystemExit, saying which
    and why). `eto_matched` is checked as ETO (its steps come from a run not made yet)."""
    for env in args.envs:
        for method in args.methods:
            checked = "eto" if method == MATCHED else method
            base = VARIANTS.get(checked, (checked,))[0]
            if not (ROOT / "configs" / env / f"{base}.yaml").is_file():
                raise SystemExit(
                    f"No {env} recipe for method {method!r} (configs/{env}/{base}.yaml); the "
                    f"grid's methods: {', '.join(ORDER)}."
                )
            try:
                recipe(args, env, checked, args.seeds[0])
            except ConfigError as exc:
                raise SystemExit(f"{env} {method}: {exc}") from None


def defaults(args: argparse.Namespace) -> None:
    """Fill in what was left out: the device's results, archive, run folder and sizes; the
    grid's envs, methods and seeds: what the archive holds for a report, else shop and sql,
    METHODS, seeds 0-2 (0-9 on cuda); SFT first (every other method starts from it),
    eto_matched after failure_agent (it reads that run's steps)."""
    cpu = args.device == "cpu"
    if not args.report_only:
        check_device(args.device)
    args.results = results_file("learning", args.device)
    args.archive = ARCHIVE if cpu else ARCHIVE.with_name(f"{ARCHIVE.name}-{args.device}")
    if args.out is None:
        args.out = ROOT / "runs" / ("learning" if cpu else f"learning-{args.device}")
    if args.sizes is None:
        args.sizes = "machine" if cpu else "paper"
    held = [path.name.rpartition("-s") for path in args.archive.glob("*/*-s*") if path.is_dir()]
    if args.envs is None:
        found = {path.parent.name for path in args.archive.glob("*/*-s*")}
        ordered = sorted(found, key=lambda e: (ENVS.index(e) if e in ENVS else len(ENVS), e))
        args.envs = ordered if args.report_only else ["shop", "sql"]
    if args.methods is None:
        args.methods = (
            list(dict.fromkeys(m for m, _, _ in held)) if args.report_only else [*METHODS]
        )
    if args.seeds is None:
        found = sorted({int(s) for _, _, s in held if s.isdigit()})
        args.seeds = found if args.report_only else list(range(3 if cpu else 10))
    if "sft" not in args.methods:
        args.methods.insert(0, "sft")
    rank = {m: i for i, m in enumerate(ORDER)}
    args.methods.sort(key=lambda m: (rank.get(m, len(ORDER)), m))


if __name__ == "__main__":
    main()
