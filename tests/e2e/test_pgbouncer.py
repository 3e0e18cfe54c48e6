"""Marina behind PgBouncer in transaction mode, prepared statements off
(MARINA_PG_PREPARED_STATEMENTS=false, as the README says for a pooler without
prepared-statement support): a real gunicorn (2 workers) whose every database
connection goes through a real PgBouncer, with fewer server connections in
its pool than the server holds client connections. Calls succeed and the
ledger is exact (docs/scaling.md has the measured counts).

Needs Debian's pgbouncer (scripts/test installs it); skipped, saying so, when
it is missing."""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.load import cost_nanousd, priced_handler, run_load, summary
from tests.e2e.servers import POSTGRES_ADMIN_URL, Ledger, free_port

pytestmark = pytest.mark.e2e

PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
POOL_SIZE = 2  # server connections per database: fewer than one worker's client connections


@contextlib.contextmanager
def pgbouncer() -> Iterator[int]:
    """PgBouncer in transaction mode in front of the test PostgreSQL, on a free loopback port."""
    assert PGBOUNCER is not None
    with tempfile.TemporaryDirectory(prefix="marina-pgbouncer-") as name:
        yield from _pgbouncer(Path(name))


def _pgbouncer(directory: Path) -> Iterator[int]:
    pg = urlsplit(POSTGRES_ADMIN_URL)
    port = free_port()
    directory.chmod(0o755)  # readable by the postgres user (below)
    (directory / "users.txt").write_text('"postgres" ""\n')
    (directory / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={pg.hostname} port={pg.port or 5432}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory / 'users.txt'}\npool_mode = transaction\n"
        f"default_pool_size = {POOL_SIZE}\nmax_client_conn = 200\nlogfile = {directory / 'pgbouncer.log'}\n"
    )
    # PgBouncer refuses to run as root: under root it runs as Debian's postgres user.
    run_as: list[str] = []
    if os.geteuid() == 0:
        run_as = ["runuser", "-u", "postgres", "--"]
        for path in (directory, *directory.iterdir()):
            shutil.chown(path, "postgres")
    proc = subprocess.Popen([*run_as, str(PGBOUNCER), str(directory / "pgbouncer.ini")], cwd=directory,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        import psycopg

        deadline = time.monotonic() + 15
        while True:
            try:
                psycopg.connect(f"postgres://postgres@127.0.0.1:{port}/postgres", connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = directory / "pgbouncer.log"
                    raise RuntimeError(f"PgBouncer did not start: {log.read_text() if log.exists() else ''}") from None
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed (scripts/test installs Debian's pgbouncer)")
def test_behind_pgbouncer_in_transaction_mode_calls_succeed_and_the_ledger_is_exact(servers, upstream):
    upstream.handler = priced_handler()
    ledger = servers.postgres()  # migrated directly: the server's connections go through PgBouncer
    # Stopped after the fixture's checks, which read the database through it.
    port = servers.stack.enter_context(pgbouncer())
    name = urlsplit(ledger.url).path.lstrip("/")
    pooled = Ledger(f"postgres://postgres@127.0.0.1:{port}/{name}")
    server = servers.start(pooled, MARINA_PG_PREPARED_STATEMENTS="false", MARINA_DAILY_SPEND_CAP_USD="1000",
                           MARINA_RATE_LIMIT_RPS="100000")
    outcomes = asyncio.run(run_load([server.base_url], MARINA_KEY, concurrency=16, requests=120,
                                    kinds=("plain", "stream")))
    assert all(o.ok for o in outcomes), summary(outcomes)
    deadline = time.monotonic() + 20
    while ledger.totals()["traces"] < 120 and time.monotonic() < deadline:
        time.sleep(0.1)
    totals = ledger.totals()
    assert totals["traces"] == totals["spans"] == totals["spend_calls"] == 120
    assert totals["spend_errors"] == 0
    expected = sum(cost_nanousd(i) for i in range(120))
    assert totals["spend_cost"] == totals["span_cost"] == totals["trace_cost"] == expected
    for o in outcomes:
        trace = ledger.trace(o.request_id)
        assert trace is not None and trace["cost_nanousd"] == cost_nanousd(o.index), o
    # No database error reached the log (a prepared statement missing on
    # another server connection would show here as well as in the calls).
    assert "prepared statement" not in server.log()
    assert "Traceback" not in server.log()
