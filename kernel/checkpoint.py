"""SQLite's checkpoints on a thread of their own, not inside a call's commit.

In WAL mode SQLite copies the write-ahead log back into the database file
(a checkpoint) once the log passes 1,000 pages, in the commit that crossed
that line: the call whose trace it was waited for it, the copy and its
fsync. At one call at a time that was about one call in a hundred: p99
+5.2-11.5 ms against +2.8-3.4 ms with the checkpoints taken out of the
commits (docs/performance.md). A server process (marina/worker.py) starts
this thread: its connections are opened with automatic checkpoints off
(`connection_created`), and the thread checkpoints every EVERY_SECONDS.

PASSIVE: the checkpoint waits for no reader or writer and none waits for it
(writers go on appending to the log meanwhile), as the automatic one did.
Each worker runs one; when two meet, one finds the other checkpointing and
skips its turn. The thread keeps a connection of its own: a worker holds
the database file open twice, its writer's connection and this one. Other
processes (manage.py commands, the tests' in-process server) keep SQLite's
automatic checkpoints.

The log is used again from its start only by a commit that finds all of it
copied back. Under a steady stream of commits that never happened: each
PASSIVE checkpoint copied what the log held when it began, and the commits
made meanwhile were never copied before the next commit came, so the log
grew by every commit, ~41 KB a call, 500 MB in 20 s at one call at a time
(docs/performance.md). So once the log holds more than LOG_PAGES (SQLite's
own threshold), the turn copies the rest of it back in the writers' turn
(kernel/dbwriter.py `turn_on`): a few pages and one fsync, with no writer
adding to it, after which the next commit starts the log again."""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
from typing import Any
from urllib.parse import quote

from django.db import connections
from django.db.backends.signals import connection_created

from kernel.dbwriter import turn_on

EVERY_SECONDS = 0.5  # 0.2 and 1.0 measured alike (docs/performance.md); the log grows by this long's commits
LOG_PAGES = 1000  # SQLite's automatic checkpoint threshold: past it, a turn ends the log (`tidy`)
_LOG_EVERY_SECONDS = 60.0

log = logging.getLogger(__name__)

_started: set[str] = set()  # the database files this process checkpoints


def database_file(alias: str = "default") -> str:
    """The SQLite file of `alias`; "" for another database or an in-memory one."""
    wrapper = connections[alias]
    name = str(wrapper.settings_dict.get("NAME") or "")
    if wrapper.vendor != "sqlite" or not name or name.startswith((":memory:", "file:")):
        return ""
    return name


def connect(path: str) -> sqlite3.Connection:
    """A connection for checkpoints, opened without creating the file. Opening
    it may wait for a lock (`timeout`); a checkpoint never does."""
    return sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, timeout=5, isolation_level=None,
                           check_same_thread=False)


def checkpoint(db: sqlite3.Connection) -> tuple[int, int, int]:
    """One PASSIVE checkpoint of the log: SQLite's (busy, frames in the log, frames checkpointed)."""
    busy, frames, done = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(busy), int(frames), int(done)


def tidy(db: sqlite3.Connection, path: str) -> tuple[int, int, int]:
    """One turn: a PASSIVE checkpoint beside the writers (the copy and its
    fsync); then, if the log holds more than LOG_PAGES, another in the write
    turn, which copies what was committed meanwhile and leaves the whole log
    copied back, so the next commit starts it again from its start. What the
    last checkpoint reported."""
    done = checkpoint(db)
    if done[1] > LOG_PAGES:
        with turn_on(path):
            done = checkpoint(db)
    return done


def _no_automatic_checkpoints(sender: Any, connection: Any, **kwargs: Any) -> None:
    if database_file(connection.alias) in _started:
        connection.connection.execute("PRAGMA wal_autocheckpoint=0")


def _run(path: str) -> None:
    # One connection for the thread's life, opened again after a failure. (Not
    # one per turn: SQLite keeps a closed connection's file open while the
    # process holds locks on that file, so it would stay open anyway.)
    db: sqlite3.Connection | None = None
    logged_at = -_LOG_EVERY_SECONDS
    while True:
        time.sleep(EVERY_SECONDS)
        try:
            db = db or connect(path)
            tidy(db, path)
        except sqlite3.Error as exc:  # the file gone, the disk full: the next turn tries again
            if db is not None:
                db.close()
                db = None
            now = time.monotonic()
            if now - logged_at >= _LOG_EVERY_SECONDS:
                logged_at = now
                log.warning("SQLite checkpoint of %s failed (%s); retried every %gs", path, exc, EVERY_SECONDS)


def start(alias: str = "default") -> bool:
    """In a server process: automatic checkpoints off for the connections it
    opens from now on, and a thread that checkpoints instead. False (nothing
    done) when `alias` is not a SQLite file."""
    path = database_file(alias)
    if not path:
        return False
    if path not in _started:
        connection_created.connect(_no_automatic_checkpoints, dispatch_uid="marina-sqlite-checkpoints")
        _started.add(path)
        threading.Thread(target=_run, args=(path,), name="sqlite-checkpoint", daemon=True).start()
    return True
