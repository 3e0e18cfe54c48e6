"""A worker's C heap, trimmed once a second on a thread of its own.

Why (docs/performance.md, issue 45): glibc's malloc serves a block under its
mmap threshold (128 KB, raised to the size of any larger block freed) from its
heap, and gives memory back to the kernel only from the heap's top. In a
burst each request's body (~19 KB here, often more) and its copies are such
blocks, thousands alive at once while the requests wait for their turn, then
freed among the streams' longer-lived blocks: the holes stayed resident.
`malloc_trim(0)` gives back every whole free page wherever it lies, so once a
second a worker's heap holds little more than what is in use.

Until 2026-12-07 a fixed 16 KB mmap threshold did this job: each such block
had pages of its own, unmapped when freed. It kept a waiting stream as small
(~35 KB at 10,000 streams over 2 workers, either way) but every body, its
encoded copy and orjson's working buffers were then mapped, faulted in and
unmapped, the other threads' TLBs flushed each time: 0.42 ms of a worker's
CPU to take a stream in, against 0.36 ms from the heap.

The trim holds an arena's lock while it walks it (up to ~12 ms in a burst of
10,000 streams, under 1 ms idle); ctypes lets the GIL go for the call, so the
event loop waits only if it allocates from that arena meanwhile. Not glibc
(no `malloc_trim`): nothing is started."""
from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable

EVERY_SECONDS = 1.0

_started = False
_lock = threading.Lock()


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def start_trimming(every: float = EVERY_SECONDS) -> bool:
    """Trim this process's heap every `every` seconds from now on (once per
    process); whether a trimming thread runs."""
    global _started
    with _lock:
        if _started:
            return True
        trim = _malloc_trim()
        if trim is None:
            return False
        threading.Thread(target=_trim_forever, args=(trim, every), name="marina-heap-trim", daemon=True).start()
        _started = True
        return True


def _trim_forever(trim: Callable[[int], int], every: float) -> None:
    while True:
        time.sleep(every)
        trim(0)
