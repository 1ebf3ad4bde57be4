"""How the speed benchmarks time and weigh one training call: CPU and wall time, peak RSS."""

from __future__ import annotations

import os
import resource
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
