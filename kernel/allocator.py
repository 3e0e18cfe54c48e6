"""A worker's C allocator: blocks of 16 KB and more get pages of their own.

Why (docs/performance.md, issue 45): glibc's malloc serves a block under its
mmap threshold (128 KB, raised to the size of any larger block freed) from its
heap, and a block freed there leaves a hole that only another C-sized block
can fill: Python's small objects live in arenas of their own. In a burst each
request's body (~19 KB here, often more) and its copies are such blocks,
thousands alive at once while the requests wait for their turn, then freed
as their provider has them, while the streams' small objects take new
arenas: the holes stayed resident. 2,000 streams over 2 workers peaked at
~60 KB a stream; with the threshold fixed at 16 KB, ~37–43 KB: such a block,
when the heap has no room for it, is mapped on its own and unmapped when
freed (7–10 µs more; a heap with room serves it as before). A
MALLOC_MMAP_THRESHOLD_ set in the environment wins. Not glibc: nothing is
changed."""
from __future__ import annotations

import ctypes
import os

MMAP_THRESHOLD = 16 * 1024
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Give blocks of `threshold` bytes and more pages of their own; whether it was set."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
