"""Giving the C heap's free memory back to the system between stages.

glibc's malloc keeps freed memory in the process for reuse: after a stage that peaked high
(an SFT stage holding activations, a long prefill), a long-lived run keeps its peak for
every later stage, where a second run beside it could have used it. `release_free_memory`
asks malloc to return every whole free page (`malloc_trim(0)`: a fraction of a second); on
a system without glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # no such library, or a libc without malloc_trim
        return None


def release_free_memory() -> bool:
    """Return the heap's free pages to the system; True when the C library could be asked."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
