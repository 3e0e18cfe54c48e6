"""The one home of Marina's database threads: a thread with its own
persistent Django connection, running the jobs given to it in order.

The ledger's writer (kernel/dbwriter.py), the rate limiter
(passthru/ratelimit.py), the daily cap's leases (passthru/spendcap.py) and
formation state (passthru/formations/state.py) each run their statements on
one of these, and each used to build its own executor, health-check
throttle and connection closing. Why a thread of one's own and a persistent
connection: Django's usual sync_to_async starts a thread and a connection per
call, measured at twice the cost of the whole request (docs/performance.md).

Django's connection health check is a round trip (PostgreSQL: SELECT 1) each
time close_old_connections() runs; once per job it cost PostgreSQL writes a
third of their throughput. Once a second is enough: a statement that fails on
a dead connection closes it and is retried on a new one by its caller. The
connection settings each thread's statements need (PostgreSQL's
synchronous_commit off for the rate limiter and the cap, prepared statements)
are made here (relax_commit) and with its statements (kernel/rawcursor.py,
kernel/prepared.py)."""
from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import close_old_connections, connection

HEALTH_CHECK_SECONDS = 1.0

_T = TypeVar("_T")

_relaxed = threading.local()  # per thread: the PostgreSQL connection set to synchronous_commit off


def relax_commit() -> None:
    """On PostgreSQL, let this thread's connection commit without waiting for
    the WAL flush (synchronous_commit off, this connection only), once per
    connection. For the threads whose rows a database crash may lose (the
    rate limiter's buckets, the cap's leases, formation state: each module
    says what that costs it), never the ledger's: a trace answered is durable."""
    if connection.vendor != "postgresql":
        return
    connection.ensure_connection()
    raw = connection.connection
    if getattr(_relaxed, "connection", None) is not raw:
        with raw.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")
        _relaxed.connection = raw


class DbThread:
    """One thread, one connection, jobs in the order they were submitted."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._checked_at = 0.0

    def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        self.check_health()
        return fn(*args)

    def submit(self, fn: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
        """Run `fn(*args)` on the thread, after what is queued there; the caller may await it or not."""
        return self._executor.submit(self._run, fn, *args)

    def submit_unchecked(self, fn: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
        """Like submit, for a job that does its own health check (the cap's: once per batch of asks)."""
        return self._executor.submit(fn, *args)

    def check_health(self) -> None:
        """close_old_connections(), at most once per HEALTH_CHECK_SECONDS (on the thread)."""
        now = time.monotonic()
        if now - self._checked_at >= HEALTH_CHECK_SECONDS:
            self._checked_at = now
            close_old_connections()

    def close_connection(self) -> None:
        """Close the thread's connection and wait (tests do, before dropping a database)."""
        # `connection` must be looked up on the thread: it is per-thread.
        self._executor.submit(lambda: connection.close()).result()
