"""Shared pieces of the benchmarks: starting servers, waiting for them, and
reading a process tree's CPU time and memory from /proc."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# Every server the benches start talks to loopback only; a proxy that goes
# nowhere catches any library that would phone home over HTTP(S).
LOOPBACK_ONLY_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its closing paren.
    return raw[raw.rindex(")") + 2 :].split()


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def tree(pid: int) -> list[int]:
    """pid and all its live descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children(p))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """user+system CPU seconds of these processes (and their reaped children)."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            # utime, stime, cutime, cstime are fields 14-17 (1-based) of the full line.
            total += sum(int(v) for v in fields[11:15])
    return total / TICK


def rss_mb(pid: int) -> float:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
    except OSError:
        return 0.0


@dataclass
class Server:
    """A server process the bench started, with its whole process tree."""

    name: str
    proc: subprocess.Popen[bytes]
    base_url: str
    log: Path
    pids: list[int] = field(default_factory=list)

    def refresh(self) -> None:
        self.pids = tree(self.proc.pid)

    def cpu(self) -> float:
        self.refresh()
        return cpu_seconds(self.pids)

    def worker_rss(self) -> list[float]:
        """Resident MB of each direct child (the workers), largest first."""
        kids = children(self.proc.pid)
        return sorted((rss_mb(p) for p in kids), reverse=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                for pid in reversed(tree(self.proc.pid)):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.proc.wait(5)


def start(name: str, cmd: list[str], *, env: dict[str, str], base_url: str, ready_path: str, log_dir: Path,
          timeout: float = 90, cwd: Path = ROOT) -> Server:
    log = log_dir / f"{name}.log"
    handle = log.open("wb")
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(name, proc, base_url, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode} on start; see {log}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(base_url + ready_path, timeout=2) as reply:
                if reply.status < 500:
                    break
        except OSError:
            time.sleep(0.25)
    else:
        server.stop()
        raise SystemExit(f"{name} did not answer {ready_path} within {timeout:.0f}s; see {log}")
    server.refresh()
    return server


def start_fake_upstream(log_dir: Path, *options: str) -> tuple[Server, int]:
    """bench/fake_upstream.py on a free port, with these command-line options; (server, port)."""
    port = free_port()
    server = start(
        "upstream",
        [sys.executable, str(ROOT / "bench" / "fake_upstream.py"), "--port", str(port), *options],
        env={**os.environ, **LOOPBACK_ONLY_ENV},
        base_url=f"http://127.0.0.1:{port}",
        ready_path="/v1/models",
        log_dir=log_dir,
    )
    tcp_ready(port)
    return server, port


def tcp_ready(port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listening on 127.0.0.1:{port}")


def ensure_wrk() -> str:
    """The wrk binary; installed from Debian's packages when missing (root only)."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("wrk is missing: install it (Debian: apt-get install -y wrk) and run again")
    print("installing wrk from Debian's packages ...", file=sys.stderr)
    if subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], capture_output=True, check=True)
    return shutil.which("wrk") or "wrk"


def marina_env(*, db_url: str, upstream_port: int, bind: str, key: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a Marina that forwards `openai/...` to the fake upstream."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MARINA_", "DATABASE_URL", "MODEL_API_KEYS"))}
    env.update(LOOPBACK_ONLY_ENV)
    env.update(
        {
            "DATABASE_URL": db_url,
            "MODEL_API_KEYS": f"{key}:bench",
            "OPENAI_API_KEY": "sk-fake-upstream-key",
            "MARINA_OPENAI_BASE_URL": f"http://127.0.0.1:{upstream_port}/v1",
            "MARINA_BIND": bind,
            "MARINA_WORKERS": "2",
            "MARINA_LOG_LEVEL": "WARNING",
            "MARINA_SECRET_KEY": "bench-only-secret",
            # The cap stays ON (its check is on the hot path), high enough that
            # thousands of priced calls never reach it.
            "MARINA_DAILY_SPEND_CAP_USD": "1000000",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def migrate(env: dict[str, str], root: Path = ROOT) -> None:
    """Migrate with the checkout that will serve the database (a variant's migrations may differ)."""
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=root, env=env, check=True)


@contextlib.contextmanager
def scratch_postgres(admin_url: str, prefix: str) -> Iterator[str]:
    """The URL of a new PostgreSQL database on the server at admin_url, dropped afterwards."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url}/{name}"
    finally:
        with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def under_callgrind(out_file: Path) -> list[str]:
    """The words that run a program under valgrind's callgrind, writing to `out_file`, counting
    nothing until the program switches counting on (`count_instructions`)."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_file}"]


def count_instructions(on: bool) -> None:
    """Switch callgrind's counting on or off for this process (run `under_callgrind`)."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True, check=True)


def instructions_counted(out_file: Path) -> int:
    """The instructions a callgrind run counted while counting was on."""
    totals = [ln for ln in out_file.read_text().splitlines() if ln.startswith(("summary:", "totals:"))]
    return int(totals[-1].split()[1])


def run_child(script: str, database_url: str, *args: str) -> Any:
    """Run `script *args` in a process of its own on `database_url` (no .env);
    the JSON its last line of output holds."""
    env = {**os.environ, "DATABASE_URL": database_url, "MARINA_ENV_FILE": os.devnull}
    out = subprocess.run(
        [sys.executable, script, *args], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_backend(backends: str, pg_admin_url: str, prefix: str, measure: Callable[[str], Any]) -> dict[str, Any]:
    """`measure(database_url)` on a fresh temporary SQLite file and/or a fresh
    PostgreSQL database (created, then dropped), as `backends` says
    ("sqlite,postgres"); their results by backend."""
    report: dict[str, Any] = {}
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory() as tmp:
            report["sqlite"] = measure(f"sqlite:///{Path(tmp) / 'bench.sqlite3'}")
    if "postgres" in backends:
        with scratch_postgres(pg_admin_url, prefix) as url:
            report["postgres"] = measure(url)
    return report


def chat_scope(body: bytes, key: str) -> dict[str, Any]:
    """The ASGI scope uvicorn hands over for `POST /v1/chat/completions` with this body and key."""
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1:3300"), (b"content-type", b"application/json"),
                    (b"authorization", f"Bearer {key}".encode()), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 3300),
    }  # fmt: skip


async def asgi_call(
    application: Any, scope: dict[str, Any], body: bytes, on_send: Callable[[Mapping[str, Any]], None]
) -> None:
    """One request through the ASGI application in this process, no server and no socket: the body
    in one message, and the client stays connected until the response is done (`on_send` sees each
    message the application sends)."""
    delivered = False
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Mapping[str, Any]) -> None:
        on_send(message)

    await application(dict(scope), receive, send)
    done.set()
