from __future__ import annotations

import platform

import pytest

from coevo.run.memory import release_free_memory


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_free_heap_memory_goes_back_to_the_system():
    # 100 KB blocks come from malloc's heap (below its mmap threshold); one block allocated
    # after them and kept alive stops free() from shrinking the heap's top on its own.
    blocks = [bytearray(100_000) for _ in range(3000)]  # 300 MB, touched (zero-filled)
    keep = bytearray(100_000)
    del blocks
    before = _rss_mb()
    assert release_free_memory()
    after = _rss_mb()
    assert before - after > 200, (before, after)
    assert len(keep) == 100_000
