"""How the speed benchmarks time and weigh one training call: CPU and wall time, peak RSS."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def measure(train) -> dict:
    """Wall time, CPU time and peak RSS growth of one training call."""
    before = rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    train()
    return {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "peak_growth_mb": peak_rss_mb() - before,
    }


def run_child(script: str, which: str, extra: list[str], threads: int, memory: bool) -> dict:
    """Run `script --child which ...` in a fresh process; its last stdout line is the result.

    `memory`: large freed buffers go back to the system, so peak RSS reflects need rather
    than allocation order (slower: used for the memory runs only).
    """
    cmd = [sys.executable, script, "--child", which, "--threads", str(threads), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if memory:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"the {which} run failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])
