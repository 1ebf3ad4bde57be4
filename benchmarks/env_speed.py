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
import platform
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevo.envs import make

RESULTS = Path(__file__).parent / "results" / "env_speed.md"


@dataclass(frozen=True)
class Case:
    label: str
    env: str
    options: dict[str, Any] = field(default_factory=dict)
    goal: float | None = None
    """Goal in steps/s on the 2-core reference machine, or None."""


CASES: list[Case] = [
    Case("shop, 5,000 products", "shop", {"n_products": 5_000}, goal=2_000),
    Case("shop, 100,000 products", "shop", {"n_products": 100_000}, goal=500),
    # The shop keeps searches and parsed products in memory, and computing the expert's
    # scripts fills that cache before the timing starts: these two show the uncached cost.
    Case(
        "shop, 5,000 products, memory cache off", "shop", {"n_products": 5_000, "memory_cache": 0}
    ),
    Case(
        "shop, 100,000 products, memory cache off",
        "shop",
        {"n_products": 100_000, "memory_cache": 0},
    ),
    Case("sql, generated databases", "sql", {}, goal=1_000),
]

# Extra per-env reports (e.g. adapter overhead against a raw package): env -> function
# returning markdown lines.
EXTRA: dict[str, Callable[[argparse.Namespace], list[str]]] = {}


def expert_steps_per_second(case: Case, seconds: float, max_tasks: int) -> dict[str, float]:
    """Replay experts on train tasks until `seconds` of env time have been spent."""
    build_start = time.perf_counter()
    env = make(case.env, **case.options)
    tasks = env.tasks("train")[:max_tasks]
    build = time.perf_counter() - build_start
    scripts = [[t.text for t in env.expert(task)] for task in tasks]
    steps, episodes, spent = 0, 0, 0.0
    try:
        while spent < seconds:
            for task, replies in zip(tasks, scripts, strict=True):
                start = time.perf_counter()
                env.reset(task)
                for reply in replies:
                    if env.step(reply).done:
                        break
                    steps += 1
                steps += 1
                spent += time.perf_counter() - start
                episodes += 1
                if spent >= seconds:
                    break
    finally:
        env.close()
    return {"steps_per_s": steps / spent, "episodes": episodes, "steps": steps, "build_s": build}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


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
    parser.add_argument("--tasks", type=int, default=200, help="Train tasks replayed per case.")
    parser.add_argument("--no-write", action="store_true", help="Print only.")
    args = parser.parse_args()
    envs = sorted({c.env for c in CASES} | set(EXTRA)) if not args.env else args.env
    stamp = time.strftime("%Y-%m-%d %H:%M")
    for env in envs:
        # Other work on the machine slows the figures: record the load they were measured under.
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        lines = [f"## {env}", "", f"Measured {stamp} on {machine()}, load average {load}.", ""]
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
