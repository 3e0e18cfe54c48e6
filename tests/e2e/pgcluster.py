"""A throw-away PostgreSQL cluster a test can stop and start: the database
going away under a running server (tests/e2e/test_spool.py). Same binaries
and settings as scripts/with-postgres (Debian's, run as `postgres` under root)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.e2e.servers import Ledger, free_port, manage


def _bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: [int(x) for x in p.parent.name.split(".") if x.isdigit()])
    return next((b for b in reversed(found) if (b / "initdb").exists() and (b / "pg_ctl").exists()), None)


class Cluster:
    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (scripts/with-postgres installs them)")
        self.bin = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="marina-pgkill."))
        os.chmod(self.dir, 0o755)
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        self._run("initdb", "-D", str(self.dir / "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        self.start()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin / tool), *args], cwd=self.dir, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run(
            "pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "server.log"), "-w", "-t", "60", "start",
            "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=100",
        )

    def kill(self) -> None:
        """`pg_ctl -m immediate stop`: connections cut, nothing flushed politely (a crash)."""
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")

    def database(self, name: str = "marina") -> Ledger:
        import psycopg

        with psycopg.connect(f"{self.url}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = f"{self.url}/{name}"
        manage("migrate", "--no-input", "-v0", database_url=url)
        return Ledger(url)

    def remove(self) -> None:
        try:
            self.kill()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
