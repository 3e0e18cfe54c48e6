"""The ledger's writer thread: one per process, with one persistent connection,
and the turn SQLite writers take. ledger/spend/services.py queues traces on it;
retention (ledger/spend/retention.py) prunes on it."""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.db import close_old_connections, connection

_turn_files: dict[str, int] = {}
_turn_lock = threading.Lock()


@contextlib.contextmanager
def write_turn() -> Iterator[None]:
    """On a SQLite file, wait for this process's turn to write on an flock.

    Several gunicorn workers write the same file. SQLite makes a writer that
    finds the lock taken sleep and retry (1, 2, 5, ... up to 100 ms per try),
    and under load the other worker keeps winning: p99 went to 1.4 s at
    concurrency 32. Blocking on an flock first wakes the next writer as soon
    as the lock is free. PostgreSQL needs nothing of the kind. (The rate
    limiter's upserts, passthru/ratelimit.py, take the same turn.)"""
    name = connection.settings_dict["NAME"]
    if connection.vendor != "sqlite" or connection.in_atomic_block or not name or str(name).startswith((":memory:", "file:")):
        yield
        return
    with _turn_lock:
        fd = _turn_files.get(str(name))
        if fd is None:
            fd = _turn_files[str(name)] = os.open(f"{name}-write-turn", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


# One writer thread per process, holding one persistent connection: Django's
# usual sync_to_async starts a thread and a connection per call, which
# was measured at twice the cost of the whole request (docs/performance.md).
_writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")


# Django's connection health check is a round trip (PostgreSQL: SELECT 1)
# each time close_old_connections() runs; once per job it cost PostgreSQL
# writes a third of their throughput. Once a second is enough: a write that
# fails on a dead connection closes it and is retried on a new one.
HEALTH_CHECK_SECONDS = 1.0
_checked_at = 0.0


_T = TypeVar("_T")


def _in_writer(fn: Callable[..., _T], *args: Any) -> _T:
    global _checked_at
    now = time.monotonic()
    if now - _checked_at >= HEALTH_CHECK_SECONDS:
        _checked_at = now
        close_old_connections()
    return fn(*args)


def submit(fn: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
    """Run a sync ledger function on the writer thread; the caller may await it or not."""
    return _writer.submit(_in_writer, fn, *args)


def close_writer_connection() -> None:
    """Close the writer thread's connection (tests do, before dropping a database)."""
    # `connection` must be looked up on the writer thread: it is per-thread.
    submit(lambda: connection.close()).result()
