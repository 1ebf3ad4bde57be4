"""Build the sciworld task manifest, check every gold path, print the counts.

    python -m coevo.envs.sciworld              # counts from the manifest (built if missing)
    python -m coevo.envs.sciworld --validate   # also replay every task's gold path (long)
    python -m coevo.envs.sciworld --validate --ship   # store the verdicts in the shipped manifest
    python -m coevo.envs.sciworld --validate --reverse  # a second worker, from the other end
    python -m coevo.envs.sciworld --splits sampled      # coevo's sampled task lists instead

Validation results go to the gold cache as they come, so an interrupted run resumes where it
stopped.
"""

from __future__ import annotations

import argparse
from collections import Counter

from rich.console import Console
from rich.table import Table

from coevo.envs.base import SPLITS, EnvError
from coevo.envs.sciworld.env import SciWorldEnv, interleave
from coevo.envs.sciworld.manifest import SHIPPED, manifest_name, write_json_gz
from coevo.progress import bar as progress_bar
from coevo.trajectory import Task


def validate(env: SciWorldEnv, console: Console, reverse: bool = False) -> None:
    """Check every task's gold path (cached ones are not redone), evaluation splits first and
    each split in `tasks()` order, so an interrupted run has settled the tasks used first."""
    tasks = [
        Task(t["id"], env.name, t["split"], t["instruction"],
             {"task_name": t["task_name"], "variation": t["variation"],
              "max_steps": env.types[t["task_name"]]["budget"]})
        for split in ("test_unseen", "test_seen", "train")
        for t in interleave([t for t in env.manifest["tasks"] if t["split"] == split])
    ]  # fmt: skip
    if reverse:  # a second process can work from the other end: the cache is shared
        tasks.reverse()
    with progress_bar(console=console) as bar:
        job = bar.add_task("gold paths", total=len(tasks))
        for task in tasks:
            bar.update(job, description=f"gold {task.id[9:]:<60}")
            try:
                env.gold_record(task)
            except EnvError as exc:
                console.print(f"[red]{task.id}: {exc}[/]")
            bar.advance(job)


def counts(env: SciWorldEnv, console: Console) -> None:
    """Per-type table of budgets and tasks per split, then the totals."""
    table = Table("type", "median gold", "budget", *SPLITS, "excluded")
    per_split = {s: Counter(t.data["task_name"] for t in env.tasks(s)) for s in SPLITS}
    for name, info in sorted(env.types.items()):
        table.add_row(
            name, "-" if info["median_gold"] is None else f"{info['median_gold']:g}",
            str(info["budget"] or "-"),
            *(str(per_split[s][name]) for s in SPLITS), info["excluded"] or "",
        )  # fmt: skip
    console.print(table)
    listed = {s: sum(1 for t in env.manifest["tasks"] if t["split"] == s) for s in SPLITS}
    kept = {s: len(env.tasks(s)) for s in SPLITS}
    for s in SPLITS:
        console.print(f"{s}: {kept[s]} tasks ({listed[s] - kept[s]} gold paths excluded)")
    # Under ETO's lists these tasks stay listed; only their demonstration is missing.
    label = "no demonstration" if env.splits == "eto" else "excluded"
    for task_id, reason in sorted(env.excluded().items()):
        console.print(f"  {label} {task_id}: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", action="store_true", help="Replay every gold path.")
    parser.add_argument("--ship", action="store_true", help="Write the verdicts into data/.")
    parser.add_argument("--reverse", action="store_true", help="Validate from the last task.")
    parser.add_argument("--splits", choices=("eto", "sampled"), default="eto",
                        help="ETO's task lists (default) or coevo's sampled ones.")  # fmt: skip
    args = parser.parse_args()
    console = Console()
    with SciWorldEnv(splits=args.splits) as env:
        console.print(f"manifest: {env.manifest_source}")
        if args.validate:
            validate(env, console, args.reverse)
        if args.ship:
            gold = {}
            for t in env.manifest["tasks"]:
                record = env.gold.get(t["id"])
                if record is not None and record.budget == env.types[t["task_name"]]["budget"]:
                    gold[t["id"]] = record.to_dict()
                    if not record.valid:  # kept out of every split: its reason is enough
                        gold[t["id"]]["actions"] = []
            env.manifest["gold"] = gold
            path = SHIPPED / manifest_name(env.sim.version, env.sim.deterministic, env.splits)
            write_json_gz(path, env.manifest)
            console.print(f"wrote {path} ({len(gold)} gold verdicts)")
        counts(env, console)


if __name__ == "__main__":
    main()
