"""Real gunicorn servers for the end-to-end tests, and their ledgers.

`start_gunicorn` runs exactly what production runs
(`gunicorn -c gunicorn.conf.py marina.asgi:application` from the project
root) on a free loopback port, with a clean environment: only the variables
given here reach it, so a developer's or CI's MARINA_*/DATABASE_URL never leak
into a test. Its output goes to a log file that the secrets checks read.

`Ledger` reads the server's database over a separate connection (sqlite3 or
psycopg), never through Django: pytest-django's test database is another
database altogether.
"""
from __future__ import annotations

import atexit
import http.client
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The server the PostgreSQL tests create their databases on: scripts/test starts a throwaway one
# and names it in MARINA_TEST_POSTGRES (MARINA_E2E_POSTGRES is the older name); a bare pytest run
# falls back to the usual local server.
POSTGRES_ADMIN_URL = (
    os.environ.get("MARINA_TEST_POSTGRES")
    or os.environ.get("MARINA_E2E_POSTGRES")
    or "postgres://postgres@127.0.0.1:5432"
)

# Variables of the calling environment that must not reach a test server.
_SCRUBBED_PREFIXES = ("MARINA_", "DJANGO_", "OTEL_")  # OTEL_: no test server exports unless told to
_SCRUBBED_SUFFIXES = ("_API_KEY", "_API_KEY_FILE", "_BASE_URL")
_SCRUBBED = {"DATABASE_URL", "MODEL_API_KEYS", "WEB_CONCURRENCY", "GEMINI_API_KEY", "GUNICORN_CMD_ARGS"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_environ(extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES) and not k.endswith(_SCRUBBED_SUFFIXES)
    }
    env["PYTHONUNBUFFERED"] = "1"  # the log file is read while the server runs
    env["MARINA_ENV_FILE"] = os.devnull  # nor a developer's .env
    env.update(extra)
    return env


def manage(
    *args: str, database_url: str, check: bool = True, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `manage.py <args>` against a database, as an operator would (with `env`'s settings)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_ROOT,
        env=clean_environ({"DATABASE_URL": database_url, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


# --- Databases -----------------------------------------------------------------
@dataclass
class Ledger:
    """A server's database, read directly: SQLite file or PostgreSQL database."""

    url: str
    sqlite_path: Path | None = None

    @property
    def is_sqlite(self) -> bool:
        return self.sqlite_path is not None

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.sqlite_path is not None:
            conn = sqlite3.connect(self.sqlite_path, timeout=30)
            try:
                return conn.execute(sql.replace("%s", "?"), params).fetchall()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.rows(sql, params)[0][0]

    def totals(self) -> dict[str, int]:
        """The counts every ledger test compares (PostgreSQL sums come back as Decimal)."""
        return {k: int(v) for k, v in {
            "traces": self.one("SELECT COUNT(*) FROM ledger_trace"),
            "spans": self.one("SELECT COUNT(*) FROM ledger_span"),
            "spend_calls": self.one("SELECT COALESCE(SUM(calls), 0) FROM spend_daily"),
            "spend_errors": self.one("SELECT COALESCE(SUM(errors), 0) FROM spend_daily"),
            "spend_cost": self.one("SELECT COALESCE(SUM(cost_nanousd), 0) FROM spend_daily"),
            "span_cost": self.one("SELECT COALESCE(SUM(cost_nanousd), 0) FROM ledger_span"),
            "trace_cost": self.one("SELECT COALESCE(SUM(cost_nanousd), 0) FROM ledger_trace"),
        }.items()}

    def trace(self, request_id: str) -> dict[str, Any] | None:
        """The trace with Marina's id `request_id`, or of the call that sent it as its x-request-id."""
        cols = ("status", "http_status", "error_kind", "error_message", "stream", "key_name", "cost_nanousd")
        found = self.rows(
            f"SELECT {', '.join(cols)} FROM ledger_trace WHERE request_id = %s OR client_request_id = %s", (request_id, request_id)
        )
        return dict(zip(cols, found[0])) if found else None

    def spans_of(self, request_id: str) -> list[dict[str, Any]]:
        cols = ("seq", "status", "http_status", "error_kind", "cost_nanousd", "provider", "upstream_model")
        found = self.rows(
            f"SELECT {', '.join('s.' + c for c in cols)} FROM ledger_span s "
            "JOIN ledger_trace t ON t.id = s.trace_id WHERE t.request_id = %s ORDER BY s.seq",
            (request_id,),
        )
        return [dict(zip(cols, row)) for row in found]

    def dump(self) -> str:
        """Every row of every table as text (what a `sqlite3 .dump` or a backup would hold)."""
        if self.sqlite_path is not None:
            conn = sqlite3.connect(self.sqlite_path, timeout=30)
            try:
                return "\n".join(conn.iterdump())
            finally:
                conn.close()
        import psycopg

        lines: list[str] = []
        with psycopg.connect(self.url, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
            for table in tables:
                lines += [f"{table}: {r[0]}" for r in conn.execute(f'SELECT t::text FROM "{table}" t')]
        return "\n".join(lines)

    def integrity(self) -> str:
        assert self.sqlite_path is not None
        return str(self.one("PRAGMA integrity_check"))


def wait_until_no_holds(ledger: Ledger, seconds: float = 10) -> None:
    """Wait until no call holds anything against the daily cap
    (passthru_spendhold: released once each call's spend is recorded)."""
    deadline = time.monotonic() + seconds
    while ledger.one("SELECT COUNT(*) FROM passthru_spendhold") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ledger.one("SELECT COUNT(*) FROM passthru_spendhold") == 0, ledger.rows("SELECT * FROM passthru_spendhold")


class SqliteTemplate:
    """One migrated SQLite file per session, copied for each server: a
    migrate costs seconds, a copy milliseconds."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "template.sqlite3"
        manage("migrate", "--no-input", "-v0", database_url=f"sqlite:///{self.path}")
        # Fold the WAL into the main file so that a plain copy is complete.
        conn = sqlite3.connect(self.path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()

    def new(self, path: Path) -> Ledger:
        shutil.copyfile(self.path, path)
        return Ledger(f"sqlite:///{path}", sqlite_path=path)


_ADMIN_DB = f"{POSTGRES_ADMIN_URL}/postgres"
_pg_template: str | None = None  # this process's migrated template database, made at first need


def _admin_execute(sql: str) -> None:
    import psycopg

    try:
        with psycopg.connect(_ADMIN_DB, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql)
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL is needed at {POSTGRES_ADMIN_URL} (bash scripts/test starts one; or set MARINA_TEST_POSTGRES to a server): {exc}"
        ) from None


def _migrated_template() -> str:
    """A database migrated to the latest, once per process (dropped at its exit): each fully
    migrated test database is a copy of it (CREATE DATABASE … TEMPLATE, a file copy in
    PostgreSQL), as SqliteTemplate's files are, instead of a `manage.py migrate` of ~4 s apiece."""
    global _pg_template
    if _pg_template is None:
        name = f"marina_tmpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        _admin_execute(f'CREATE DATABASE "{name}"')
        atexit.register(_admin_execute, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        manage("migrate", "--no-input", "-v0", database_url=f"{POSTGRES_ADMIN_URL}/{name}")
        _pg_template = name
    return _pg_template


@contextmanager
def postgres_database(prefix: str = "marina_reliab", migrate: tuple[str, ...] = ()) -> Iterator[Ledger]:
    """A fresh PostgreSQL database, migrated (to `migrate`'s app and migration when
    given, else to the latest: a copy of this process's migrated template), dropped afterwards."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    template = "" if migrate else f' TEMPLATE "{_migrated_template()}"'
    _admin_execute(f'CREATE DATABASE "{name}"{template}')
    url = f"{POSTGRES_ADMIN_URL}/{name}"
    try:
        if migrate:
            manage("migrate", *migrate, "--no-input", "-v0", database_url=url)
        yield Ledger(url)
    finally:
        _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- gunicorn --------------------------------------------------------------------
_TCP_STATES = {"01": "ESTABLISHED", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "0A": "LISTEN"}


@dataclass(frozen=True)
class Descriptor:
    fd: int
    target: str
    local_port: int | None = None
    remote_port: int | None = None
    state: str = ""

    def __str__(self) -> str:
        if self.state:
            return f"{self.fd}: tcp :{self.local_port} -> :{self.remote_port} {self.state}"
        return f"{self.fd}: {self.target}"


@dataclass
class Gunicorn:
    """One running gunicorn master and its workers."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    workers: int
    env: dict[str, str] = field(repr=False)
    ledger: Ledger | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def worker_pids(self) -> set[int]:
        """The master's children, read from /proc (the workers)."""
        pids = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # Field 4 (ppid) follows the parenthesised command name.
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.pid:
                pids.add(int(entry.name))
        return pids

    def descriptors(self, pid: int) -> list[Descriptor]:
        """What a worker's descriptors point at, TCP sockets with their ports and state."""
        sockets: dict[str, tuple[int, int, str]] = {}
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                f = line.split()
                local, remote = (int(addr.rsplit(":", 1)[1], 16) for addr in (f[1], f[2]))
                sockets[f[9]] = (local, remote, _TCP_STATES.get(f[3], f[3]))
        found = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue  # closed meanwhile
            tcp = sockets.get(target[8:-1]) if target.startswith("socket:[") else None
            if tcp:
                found.append(Descriptor(int(fd), target, local_port=tcp[0], remote_port=tcp[1], state=tcp[2]))
            else:
                found.append(Descriptor(int(fd), target))
        return sorted(found, key=lambda d: d.fd)

    def running(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM (graceful: in-flight calls finish) and wait for the exit code."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the master and every worker at once: a crash, not a shutdown."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


def start_gunicorn(
    *,
    database_url: str,
    log_path: Path,
    env: Mapping[str, str],
    workers: int = 2,
    port: int | None = None,
    startup_timeout: float = 60,
) -> Gunicorn:
    """Start `gunicorn -c gunicorn.conf.py marina.asgi:application` and wait
    until every worker has started and /v1/health answers. A free port chosen here
    can be taken by another test process before gunicorn binds it (the suite runs on
    two pytest workers): then another is chosen."""
    for attempt in range(3):
        try:
            return _start_gunicorn(database_url=database_url, log_path=log_path, env=env, workers=workers,
                                   port=port or free_port(), startup_timeout=startup_timeout)  # fmt: skip
        except _PortTaken:
            if port or attempt == 2:
                raise
    raise AssertionError("unreachable")


class _PortTaken(RuntimeError):
    pass


def _start_gunicorn(
    *, database_url: str, log_path: Path, env: Mapping[str, str], workers: int, port: int, startup_timeout: float
) -> Gunicorn:
    full_env = clean_environ(
        {
            "MARINA_BIND": f"127.0.0.1:{port}",
            "MARINA_WORKERS": str(workers),
            "MARINA_GRACEFUL_TIMEOUT": "30",
            "DATABASE_URL": database_url,
            **env,
        }
    )
    earlier = len(log_path.read_text(errors="replace")) if log_path.exists() else 0  # an earlier attempt's lines
    log_file = open(log_path, "ab")  # handed to the child, closed below
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "marina.asgi:application"],
            cwd=PROJECT_ROOT,
            env=full_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so kill() reaches the workers too
        )
    finally:
        log_file.close()
    server = Gunicorn(proc=proc, port=port, log_path=log_path, workers=workers, env=full_env)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if not server.running():
            error = _PortTaken if "Address already in use" in server.log()[earlier:] else RuntimeError
            raise error(f"gunicorn exited with {proc.returncode}:\n{server.log()[-3000:]}")
        if server.log().count("Application startup complete") >= workers and _healthy(port):
            return server
        time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"gunicorn did not start within {startup_timeout}s:\n{server.log()[-3000:]}")


def _healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/v1/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()
