"""Expert-episode steps per second of each environment.

    python benchmarks/env_speed.py                 # every case
    python benchmarks/env_speed.py --env shop      # the cases of one env

Each case builds an env, replays the expert on its training tasks for a few seconds and
reports steps/s (env time only: building the env and the expert's actions are not timed).
The figures replace that env's section of benchmarks/results/env_speed.md, with the machine.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine import describe

from coevo.envs import make

RESULTS = Path(__file__).parent / "results" / "env_speed.md"


@dataclass(frozen=True)
class Case:
    label: str
    env: str
    options: dict[str, Any] = field(default_factory=dict)
    goal: float | None = None
    """Goal in steps/s on the 2-core reference machine, or None."""
    max_tasks: int | None = None
    """Cap on the train tasks replayed (an env whose experts are costly to compute)."""


CASES: list[Case] = [
    Case("shop, 5,000 products", "shop", {"n_products": 5_000}, goal=2_000),
    Case("shop, 100,000 products", "shop", {"n_products": 100_000}, goal=500),
    # The shop keeps searches and parsed products in memory (cold at the start of the timing,
    # it still serves repeats within and across episodes): these two show the cost without it.
    Case(
        "shop, 5,000 products, memory cache off", "shop", {"n_products": 5_000, "memory_cache": 0}
    ),
    Case(
        "shop, 100,000 products, memory cache off",
        "shop",
        {"n_products": 100_000, "memory_cache": 0},
    ),
    Case("sql, generated databases", "sql", {}, goal=1_000),
    Case("sciworld, gold paths (real JVM)", "sciworld", {}, max_tasks=30),
    # One step per user turn's calls and one per answer; each reset loads two back-ends (the
    # agent's and the ground truth's) and each answer runs the package's state and response
    # checks.
    Case("bfcl, multi_turn_base ground truth (bfcl-eval back-ends)", "bfcl", {}),
]

# Extra per-env reports (e.g. adapter overhead against a raw package): env -> function
# returning markdown lines.
EXTRA: dict[str, Callable[[argparse.Namespace], list[str]]] = {}


def expert_steps_per_second(case: Case, seconds: float, max_tasks: int) -> dict[str, float]:
    """Replay experts on distinct train tasks until `seconds` of env time have been spent.

    The expert's scripts are computed on one env instance and replayed on a fresh one, so
    whatever the env caches in memory starts cold, as it would in a rollout; tasks repeat only
    when `max_tasks` episodes take less than `seconds`.
    """
    scripts_env = make(case.env, **case.options)
    try:
        tasks = scripts_env.tasks("train")[: min(max_tasks, case.max_tasks or max_tasks)]
        scripts = [[t.text for t in scripts_env.expert(task)] for task in tasks]
    finally:
        scripts_env.close()
    build_start = time.perf_counter()
    env = make(case.env, **case.options)
    build = time.perf_counter() - build_start
    steps, episodes, spent = 0, 0, 0.0
    try:
        while spent < seconds:
            for task, replies in zip(tasks, scripts, strict=True):
                start = time.perf_counter()
                env.reset(task)
                for reply in replies:
                    steps += 1
                    if env.step(reply).done:
                        break
                spent += time.perf_counter() - start
                episodes += 1
                if spent >= seconds:
                    break
    finally:
        env.close()
    return {"steps_per_s": steps / spent, "episodes": episodes, "steps": steps, "build_s": build}


def sciworld_overhead(args: argparse.Namespace) -> list[str]:
    """SciWorldEnv.step against the scienceworld package on the same gold actions and JVM."""
    from coevo.envs.react import parse
    from coevo.envs.sciworld.protocol import SIMPLIFICATION

    env = make("sciworld")
    timed = {"adapter": 0.0, "package": 0.0, "direct": 0.0}
    steps = 0
    try:
        tasks = env.tasks("train")[: min(args.tasks, 28)]
        scripts = [[t.text for t in env.expert(task)] for task in tasks]
        raw = env.sim.raw  # the package's ScienceWorldEnv, on the adapter's own JVM
        server = raw.server

        def one_round(count: bool) -> None:
            nonlocal steps
            for task, replies in zip(tasks, scripts, strict=True):
                name, variation = task.data["task_name"], task.data["variation"]
                env.reset(task)
                start, n = time.perf_counter(), 0
                for reply in replies:
                    n += 1
                    if env.step(reply).done:
                        break
                adapter = time.perf_counter() - start
                actions = [parse(r).action for r in replies[:n]]
                raw.load(name, variation, SIMPLIFICATION)
                raw.reset()
                start = time.perf_counter()
                for action in actions:
                    raw.step(action)
                package = time.perf_counter() - start
                # The JVM calls the adapter makes, without the adapter around them.
                server.load(name, variation, SIMPLIFICATION, False)
                server.step("look around")
                start = time.perf_counter()
                for action in actions:
                    server.step(action)
                    server.getScore()
                    server.getCompleted()
                direct = time.perf_counter() - start
                if count:
                    timed["adapter"] += adapter
                    timed["package"] += package
                    timed["direct"] += direct
                    steps += n

        one_round(count=False)  # JIT warm-up for all three paths
        while timed["adapter"] < args.seconds:
            one_round(count=True)
    finally:
        env.close()
    rate = {k: steps / v for k, v in timed.items()}
    vs_package = timed["adapter"] / timed["package"] - 1
    vs_direct = timed["adapter"] / timed["direct"] - 1
    lines = [
        f"Adapter overhead on the same gold actions ({steps} steps of {len(tasks)} train "
        f"tasks per path, load `{os.getloadavg()[0]:.2f}` at the end):",
        "",
        "| path | steps/s |",
        "| --- | --- |",
        f"| `SciWorldEnv.step` (adapter) | {rate['adapter']:,.1f} |",
        f"| `scienceworld.ScienceWorldEnv.step` (raw package) | {rate['package']:,.1f} |",
        f"| the adapter's three JVM calls, unwrapped | {rate['direct']:,.1f} |",
        "",
        f"overhead vs the raw package: {vs_package:+.1%} (goal < +5%: "
        f"{'met' if vs_package < 0.05 else 'NOT met'}); vs its own unwrapped JVM calls: "
        f"{vs_direct:+.1%}. The package's step also computes the look, the inventory, the "
        "task description and all valid actions every step; the adapter asks only for the "
        "observation, the score and the done flag.",
    ]
    for line in lines:
        print(line, flush=True)
    return lines


EXTRA["sciworld"] = sciworld_overhead


def write_section(env: str, lines: list[str]) -> None:
    """Replace this env's section of the results file, keeping the others."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Environment speed\n"
    begin, end = f"<!-- {env}:begin -->", f"<!-- {env}:end -->"
    block = "\n".join([begin, *lines, end])
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text}\n{block}\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", help="Only these envs (repeatable).")
    parser.add_argument("--seconds", type=float, default=5.0, help="Timed env seconds per case.")
    parser.add_argument("--tasks", type=int, default=1500, help="Train tasks replayed per case.")
    parser.add_argument("--no-write", action="store_true", help="Print only.")
    parser.add_argument(
        "--note", help="A line added to each section written (e.g. what else ran meanwhile)."
    )
    args = parser.parse_args()
    envs = sorted({c.env for c in CASES} | set(EXTRA)) if not args.env else args.env
    stamp = time.strftime("%Y-%m-%d %H:%M")
    for env in envs:
        lines = [
            f"## {env}",
            "",
            f"Measured {stamp} on {describe()}.",
            "",
            *([args.note, ""] if args.note else []),
            f"Timed on a fresh env over up to {args.tasks} distinct train tasks; when they take "
            f"less than {args.seconds:g} s they repeat, and an env's memory cache is then warm.",
            "",
        ]
        lines += [
            "| case | steps/s | goal | episodes | env build (s) |",
            "| --- | --- | --- | --- | --- |",
        ]
        for case in (c for c in CASES if c.env == env):
            r = expert_steps_per_second(case, args.seconds, args.tasks)
            goal = "" if case.goal is None else f">= {case.goal:,.0f}"
            met = (
                ""
                if case.goal is None
                else (" (met)" if r["steps_per_s"] >= case.goal else " (NOT met)")
            )
            row = f"| {case.label} | {r['steps_per_s']:,.0f} | {goal}{met} | {r['episodes']} | {r['build_s']:.1f} |"
            print(row, flush=True)
            lines.append(row)
        if env in EXTRA:
            lines += ["", *EXTRA[env](args)]
        if not args.no_write:
            write_section(env, lines)


if __name__ == "__main__":
    main()
