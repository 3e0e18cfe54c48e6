"""SQLite's checkpoints on a thread of their own (kernel/checkpoint.py): a
server process's connections commit without ever checkpointing, and the
thread copies the log back into the database file meanwhile."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernel import checkpoint


def _wal_database(path: Path, rows: int) -> sqlite3.Connection:
    """A WAL database whose `rows` commits are all in the log (kept open: closing
    the last connection would checkpoint it)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (x TEXT)")
    for _ in range(rows):
        db.execute("INSERT INTO t VALUES (?)", ["x" * 4000])
    return db


def test_a_checkpoint_copies_the_whole_log_back_and_waits_for_nobody(tmp_path):
    path = tmp_path / "a ledger #1?.sqlite3"  # a file name is not read as a URI's query or fragment
    writer = _wal_database(path, 100)
    size_before = path.stat().st_size
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("SELECT count(*) FROM t").fetchone()  # a reader beside it does not stop a PASSIVE checkpoint
    busy, frames, done = checkpoint.checkpoint(checkpoint.connect(str(path)))
    assert busy == 0 and frames >= 100 and done == frames
    assert path.stat().st_size >= size_before + 100 * 4000  # the rows are in the database file now
    writer.close()
    reader.close()


def test_a_missing_database_is_an_error_and_is_not_created(tmp_path):
    path = tmp_path / "gone.sqlite3"
    with pytest.raises(sqlite3.OperationalError):
        checkpoint.connect(str(path))
    assert not path.exists()


def test_only_a_sqlite_file_gets_a_checkpointer(settings):
    from django.db import connections

    wrapper = connections["default"]
    if wrapper.vendor != "sqlite":
        assert checkpoint.database_file() == ""
    else:
        assert checkpoint.database_file() == str(wrapper.settings_dict["NAME"])


def test_a_server_process_commits_without_checkpoints_and_its_thread_checkpoints(tmp_path):
    """In a process of its own, as a gunicorn worker: start() before the
    first connection, then 300 commits of 4 KB: without the thread the
    database file would stay empty (the log holds them, automatic
    checkpoints are off, and 300 pages are under their 1,000 anyway)."""
    path = tmp_path / "server.sqlite3"
    code = (
        "import os, time, django\n"
        "django.setup()\n"
        "from django.db import connection\n"
        "from kernel import checkpoint\n"
        "assert checkpoint.start()\n"
        "with connection.cursor() as cursor:\n"
        "    cursor.execute('PRAGMA wal_autocheckpoint')\n"
        "    print(cursor.fetchone()[0], flush=True)\n"
        "    cursor.execute('CREATE TABLE t (x TEXT)')\n"
        "    for _ in range(300):\n"
        "        cursor.execute('INSERT INTO t VALUES (%s)', ['x' * 4000])\n"
        "path = checkpoint.database_file()\n"
        "deadline = time.monotonic() + 10\n"
        "while os.path.getsize(path) < 300 * 4000 and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print(os.path.getsize(path) >= 300 * 4000, flush=True)\n"
        "os._exit(0)  # as the worker ends: its connection left open, nothing checkpointed on the way out\n"
    )
    assert _as_a_worker(path, code) == ["0", "True"]
    assert os.path.exists(f"{path}-wal")  # still WAL mode: the log was checkpointed, not done away with


def test_under_steady_commits_the_log_is_used_again_from_its_start(tmp_path):
    """Commits one after another, each in the write turn as the ledger's
    writer takes it, while the thread checkpoints: a PASSIVE checkpoint
    alone never found the log all copied back before the next commit, and
    the log grew by every commit (these 40,000 of 4 KB: 119, 240, 360, 480 MB
    after each quarter). The turn's second checkpoint keeps it to what is
    committed while a turn comes round: it stops growing (how high depends on
    the machine, that it stops does not). Between commits the loop lets
    other threads run, as the ledger's writer does while it waits for work: a
    loop that never did took the turn back before the checkpoint thread could
    run, and with other processes on the cores the log grew 49, 61, 89, 102 MB."""
    path = tmp_path / "steady.sqlite3"
    code = (
        "import os, time, django\n"
        "django.setup()\n"
        "from django.db import connection\n"
        "from kernel import checkpoint\n"
        "from kernel.dbwriter import write_turn\n"
        "checkpoint.EVERY_SECONDS = 0.1\n"
        "assert checkpoint.start()\n"
        "with connection.cursor() as cursor:\n"
        "    cursor.execute('CREATE TABLE t (x TEXT)')\n"
        "log = checkpoint.database_file() + '-wal'\n"
        "largest = 0\n"
        "for i in range(40000):\n"
        "    with write_turn(), connection.cursor() as cursor:\n"
        "        cursor.execute('INSERT INTO t VALUES (%s)', ['x' * 4000])\n"
        "    time.sleep(0)  # as the writer thread waits for its next job: else this loop holds the GIL and takes the turn back at once\n"
        "    largest = max(largest, os.path.getsize(log))\n"
        "    if i % 10000 == 9999:\n"
        "        print(largest, flush=True)\n"
        "os._exit(0)\n"
    )
    quarters = [int(size) for size in _as_a_worker(path, code)]
    assert len(quarters) == 4
    mb = [f"{size / 2**20:.0f} MB" for size in quarters]
    assert quarters[-1] < 1.5 * quarters[0], f"the log kept growing: {', '.join(mb)} after each 10,000 commits"
    assert quarters[-1] < 40000 * 4000, mb  # less than was committed


def _as_a_worker(path: Path, code: str) -> list[str]:
    """Run `code` in a process of its own, as a gunicorn worker runs (Django
    set up on the SQLite file `path`); the words it printed."""
    env = {
        "DJANGO_SETTINGS_MODULE": "marina.settings",
        "DATABASE_URL": f"sqlite:///{path}",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    return done.stdout.split()
