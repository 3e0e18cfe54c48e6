"""The writer thread: one per process, with one persistent connection, and the
turn SQLite writers take. ledger/spend/services.py queues traces on it;
retention (ledger/spend/retention.py) prunes on it; passthru reads its stored
keys and recent providers on it, and waits on it for the writes queued before
a worker exits (passthru/afterwards.py). The rate limiter, the daily cap and
formation state take the same write turn on SQLite."""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, Error, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from kernel.dbthread import DbThread

_turn_files: dict[str, int] = {}
_turn_lock = threading.Lock()


@contextlib.contextmanager
def write_turn(conn: BaseDatabaseWrapper | None = None) -> Iterator[None]:
    """On a SQLite file, wait for this process's turn to write on an flock.

    Several gunicorn workers write the same file. SQLite makes a writer that
    finds the lock taken sleep and retry (1, 2, 5, ... up to 100 ms per try),
    and under load the other worker keeps winning: p99 went to 1.4 s at
    concurrency 32. Blocking on an flock first wakes the next writer as soon
    as the lock is free. PostgreSQL needs nothing of the kind. (The rate
    limiter's upserts, passthru/ratelimit.py, take the same turn.)"""
    if conn is None:  # looked up once: each `django.db.connection.x` looks it up again (~17,000 instructions)
        conn = connections[DEFAULT_DB_ALIAS]
    name = conn.settings_dict["NAME"]
    if conn.vendor != "sqlite" or conn.in_atomic_block or not name or str(name).startswith((":memory:", "file:")):
        yield
        return
    with turn_on(str(name)):
        yield


@contextlib.contextmanager
def turn_on(path: str) -> Iterator[None]:
    """The write turn on the SQLite file `path` (`write_turn`; kernel/checkpoint.py
    takes it too, to copy the end of the log back while no one writes)."""
    with _turn_lock:
        fd = _turn_files.get(path)
        if fd is None:
            fd = _turn_files[path] = os.open(f"{path}-write-turn", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def sqlite_transaction(conn: BaseDatabaseWrapper) -> Iterator[None]:
    """A transaction on SQLite outside any atomic block, in this process's
    write turn: BEGIN (with the connection's transaction_mode, IMMEDIATE:
    marina/settings.py), then COMMIT, or on any error ROLLBACK (the connection
    closed if even that fails) and the error raised; Django's exceptions, as
    from its cursors. What transaction.atomic() does there, run on the
    driver's connection: atomic's own steps around it (autocommit off and on,
    the BEGIN through Django's cursor, its commit hooks) were ~115,000
    instructions of a plain call's trace write (647,000 → 533,000, the trace's
    statements and COMMIT included)."""
    with write_turn(conn):
        conn.ensure_connection()
        raw = conn.connection
        with conn.wrap_database_errors:
            raw.execute(f"BEGIN {conn.transaction_mode or ''}")  # type: ignore[attr-defined]
        try:
            yield
            with conn.wrap_database_errors:
                raw.commit()
        except BaseException:
            try:
                with conn.wrap_database_errors:
                    raw.rollback()
            except Error:
                conn.close()  # as atomic does: a connection that cannot roll back is not used again
            raise


# One writer thread per process, holding one persistent connection
# (kernel/dbthread.py: the home of the database threads).
_writer = DbThread("ledger")

_T = TypeVar("_T")


def submit(fn: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
    """Run a sync ledger function on the writer thread; the caller may await it or not."""
    return _writer.submit(fn, *args)


def close_writer_connection() -> None:
    """Close the writer thread's connection (tests do, before dropping a database)."""
    _writer.close_connection()
