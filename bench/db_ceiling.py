"""What one answered call costs PostgreSQL, and where one database stops.

N Marina servers (gunicorn, 2 workers each, as in production) share one
PostgreSQL: a scratch cluster this script makes (initdb in a temporary
directory, a free loopback port, pg_stat_statements preloaded, durable
defaults: fsync and synchronous_commit on), stopped and removed at the end.
They forward to bench/fake_upstream.py. The daily cap is on (far off) and the
rate limiter is on (far off), so their statements are counted as production
pays them.

For plain and streamed calls, after a warm-up (connections open, statements
prepared), --calls calls are sent at concurrency 1 and the database is read
before and after:

- statements per call: pg_stat_statements `calls` of Marina's role in
  Marina's database (BEGIN/COMMIT and SET counted: track_utility on), less
  the foreign-key checks PostgreSQL runs itself for each span insert
  (`SELECT … FROM ONLY … FOR KEY SHARE OF x`, which pg_stat_statements lists
  at top level), counted apart;
- write transactions per call: xids assigned (the snapshot's xmax before and
  after; pg_stat_database's xact counters lag up to 10 s behind idle backends);
- round trips per call: at concurrency 1 nothing is pipelined (the writer
  pipelines only a batch of traces waiting together), so every statement is
  one round trip: round trips = statements;
- WAL bytes per call: pg_current_wal_lsn() before and after (after a CHECKPOINT,
  so full-page images of the first touch of each page after it are included,
  as in steady state);
- backend CPU ms per call: utime + stime from /proc of the client backends
  serving Marina, and apart the cluster's other processes (WAL writer,
  checkpointer, autovacuum); pg_stat_statements total_exec_time as a lower bound.

Then throughput: --seconds of calls at each of --concurrency, calls/s, the CPU
cores PostgreSQL used, Marina's, and the ceiling it implies: calls/s per
database core = calls / PostgreSQL CPU seconds. The load average is printed
with every run: on a busy machine the throughput figures are not trustworthy,
the per-call counts are (they do not depend on load).

`--pgbouncer` runs it all again with the Marina servers behind PgBouncer in
transaction mode (Debian's pgbouncer, started on a free loopback port with its
config in a temporary directory, stopped at the end;
MARINA_PG_PREPARED_STATEMENTS=false) and checks the ledger: traces = calls,
spend_daily calls = calls, spend cost = the sum of the traces' costs = calls ×
one call's cost. Both runs count the connections each server worker holds
(pg_stat_activity, or PgBouncer's client sockets, by owning process).

    .venv/bin/python bench/db_ceiling.py                       # ~2 min
    .venv/bin/python bench/db_ceiling.py --servers 2 --pgbouncer --calls 300 --seconds 10
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    Server,
    children,
    cpu_seconds,
    free_port,
    marina_env,
    migrate,
    start,
    start_fake_upstream,
    tcp_ready,
    tree,
)

KEY = "sk-marina-db-ceiling"
MODEL = "openai/gpt-4.1-mini"
MEASURER = "bench_measurer"  # this script's role: its statements are not Marina's
SETTLE_S = 1.5  # PostgreSQL flushes an idle backend's pg_stat_database counters within 1 s


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- The scratch cluster and PgBouncer -------------------------------------------------
def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise SystemExit("no initdb under /usr/lib/postgresql: install Debian's postgresql (scripts/with-postgres does)")
    return found[-1].parent


def _as_owner() -> list[str]:
    """PostgreSQL and PgBouncer refuse to run as root: under root, run them as `postgres`."""
    if os.geteuid() != 0:
        return []
    owner = "postgres"
    if subprocess.run(["id", "-u", owner], capture_output=True).returncode != 0:
        owner = "nobody"
    return ["runuser", "-u", owner, "--"]


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, _as_owner()[2])


@contextlib.contextmanager
def scratch_cluster(tmp: Path) -> Iterator[tuple[str, int]]:
    """(admin URL, postmaster pid) of a new cluster with pg_stat_statements."""
    pg_bin, as_owner = _pg_bin(), _as_owner()
    directory = tmp / "pg"
    directory.mkdir()
    _own(directory)
    subprocess.run([*as_owner, str(pg_bin / "initdb"), "-D", str(directory / "data"), "-U", "postgres", "-A", "trust",
                    "-E", "UTF8", "--no-sync"], cwd=directory, check=True, capture_output=True)
    port = free_port()
    options = (f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c max_connections=300 "
               "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all "
               "-c pg_stat_statements.track_utility=on")
    subprocess.run([*as_owner, str(pg_bin / "pg_ctl"), "-D", str(directory / "data"), "-l", str(directory / "server.log"),
                    "-w", "-t", "60", "start", "-o", options], cwd=directory, check=True, capture_output=True)
    try:
        pid = int((directory / "data" / "postmaster.pid").read_text().split()[0])
        yield f"postgres://postgres@127.0.0.1:{port}", pid
    finally:
        subprocess.run([*as_owner, str(pg_bin / "pg_ctl"), "-D", str(directory / "data"), "-m", "immediate", "-w", "stop"],
                       cwd=directory, capture_output=True)


@contextlib.contextmanager
def pgbouncer(tmp: Path, pg_port: int, pool_size: int) -> Iterator[tuple[int, int]]:
    """PgBouncer in transaction mode in front of the cluster; (its port, the pid to read its CPU from)."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        raise SystemExit("pgbouncer is missing: install it (Debian: apt-get install -y pgbouncer) and run again")
    directory = tmp / "pgbouncer"
    directory.mkdir()
    port = free_port()
    (directory / "users.txt").write_text('"postgres" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={pg_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'users.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = 1000\n"
        f"logfile = {directory / 'pgbouncer.log'}\n"
        "admin_users = postgres\n"
    )
    for path in (directory, *directory.iterdir()):
        _own(path)
    proc = subprocess.Popen([*_as_owner(), binary, str(directory / "pgbouncer.ini")], cwd=directory,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        tcp_ready(port)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# --- Reading the database ---------------------------------------------------------
@dataclass
class Snapshot:
    statements: int  # top level: sent by Marina
    nested: int  # run by PostgreSQL inside them (the spans' foreign-key checks)
    exec_ms: float
    xacts: int
    wal_lsn: str
    backend_cpu: dict[int, float]  # client backends serving Marina
    other_cpu: dict[int, float]  # the rest of the cluster
    by_query: dict[str, int]


class Database:
    def __init__(self, admin_url: str, postmaster: int, dbname: str, first: bool) -> None:
        """Create Marina's database `dbname` (and on the `first`, this script's role and the extension)."""
        import psycopg

        self.postmaster = postmaster
        self.dbname = dbname
        with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as conn:
            if first:
                conn.execute(f"CREATE ROLE {MEASURER} SUPERUSER LOGIN")
                conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute(f'CREATE DATABASE "{dbname}"')
        base = admin_url.replace("postgres@", f"{MEASURER}@", 1)
        self.meta = psycopg.connect(f"{base}/postgres", autocommit=True)
        self.ledger = psycopg.connect(f"{base}/{dbname}", autocommit=True)

    def one(self, sql: str) -> Any:
        return self.meta.execute(sql).fetchone()[0]  # type: ignore[index]

    def in_ledger(self, sql: str) -> Any:
        return self.ledger.execute(sql).fetchone()[0]  # type: ignore[index]

    def wait_traces(self, expected: int, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while True:
            found = int(self.in_ledger("SELECT count(*) FROM ledger_trace"))
            if found >= expected or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def snapshot(self) -> Snapshot:
        time.sleep(SETTLE_S)
        self.meta.execute("SELECT pg_stat_clear_snapshot()")
        rows = self.meta.execute(
            "SELECT s.query, s.calls, s.total_exec_time, s.toplevel FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid "
            "WHERE d.datname = %s AND r.rolname = 'postgres'", (self.dbname,)
        ).fetchall()
        by_query: dict[str, int] = {}
        for query, calls, _, toplevel in rows:
            key = query if toplevel and not _internal(query) else f"(by PostgreSQL) {query}"
            by_query[key] = by_query.get(key, 0) + calls
        xacts = self.one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
        marina_pids = {r[0] for r in self.meta.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND usename = 'postgres'", (self.dbname,))}
        backend, other = {}, {}
        for pid in children(self.postmaster):
            (backend if pid in marina_pids else other)[pid] = cpu_seconds([pid])
        return Snapshot(
            statements=sum(r[1] for r in rows if r[3] and not _internal(r[0])),
            nested=sum(r[1] for r in rows if not r[3] or _internal(r[0])),
            exec_ms=sum(r[2] for r in rows if r[3] and not _internal(r[0])), xacts=int(xacts),
            wal_lsn=self.one("SELECT pg_current_wal_lsn()::text"), backend_cpu=backend, other_cpu=other, by_query=by_query,
        )

    def wal_bytes(self, a: str, b: str) -> int:
        return int(self.meta.execute("SELECT pg_wal_lsn_diff(%s, %s)", (b, a)).fetchone()[0])  # type: ignore[index]

    def close(self) -> None:
        self.meta.close()
        self.ledger.close()


def _internal(query: str) -> bool:
    """A foreign-key check PostgreSQL runs itself (ri_triggers.c's query)."""
    return query.startswith("SELECT $2 FROM ONLY") and "FOR KEY SHARE OF x" in query


def _cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


# --- Calls ------------------------------------------------------------------------------
def _body(stream: bool) -> bytes:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Where is reservation 4WQ150?"}]}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


class Caller:
    """Keep-alive HTTP clients, one per thread, spread over the servers."""

    def __init__(self, servers: list[Server]) -> None:
        self.ports = [int(s.base_url.rsplit(":", 1)[1]) for s in servers]
        self.local = threading.local()
        self.failures: list[str] = []

    def call(self, i: int, stream: bool) -> None:
        conns = getattr(self.local, "conns", None)
        if conns is None:
            conns = self.local.conns = {}
        port = self.ports[i % len(self.ports)]
        conn = conns.get(port) or conns.setdefault(port, http.client.HTTPConnection("127.0.0.1", port, timeout=60))
        try:
            conn.request("POST", "/v1/chat/completions", _body(stream),
                         {"authorization": f"Bearer {KEY}", "content-type": "application/json"})
            reply = conn.getresponse()
            data = reply.read()
            if reply.status != 200 or (stream and b"[DONE]" not in data):
                self.failures.append(f"{reply.status} {data[:200]!r}")
        except (OSError, http.client.HTTPException) as exc:
            conns.pop(port, None)
            self.failures.append(repr(exc))

    def run(self, start_index: int, calls: int, concurrency: int, stream: bool) -> float:
        """Send `calls` calls; the wall seconds they took."""
        counter = iter(range(start_index, start_index + calls))
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                self.call(i, stream)

        wall = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            for f in [pool.submit(worker) for _ in range(concurrency)]:
                f.result()
        return time.perf_counter() - wall

    def run_for(self, start_index: int, seconds: float, concurrency: int, stream: bool) -> tuple[int, float]:
        """Calls for `seconds`; (calls sent, wall seconds)."""
        stop = time.monotonic() + seconds
        sent = [0] * concurrency

        def worker(w: int) -> None:
            i = start_index + w
            while time.monotonic() < stop:
                self.call(i, stream)
                sent[w] += 1
                i += concurrency

        wall = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            for f in [pool.submit(worker, w) for w in range(concurrency)]:
                f.result()
        return sum(sent), time.perf_counter() - wall


# --- Connections held ------------------------------------------------------------------
def _owners(port: int) -> dict[int, int]:
    """Client sockets connected to 127.0.0.1:port, by owning pid (from `ss`)."""
    out = subprocess.run(["ss", "-Htnp", "state", "established", "dst", f"127.0.0.1:{port}"],
                         capture_output=True, text=True).stdout
    counts: dict[int, int] = {}
    for pid in re.findall(r"pid=(\d+)", out):
        counts[int(pid)] = counts.get(int(pid), 0) + 1
    return counts


def connections_per_worker(servers: list[Server], db_port: int) -> list[list[int]]:
    owners = _owners(db_port)
    return [[owners.get(w, 0) for w in sorted(children(s.proc.pid))] for s in servers]


# --- A run ---------------------------------------------------------------------------------
def per_call(db: Database, caller: Caller, index: int, calls: int, stream: bool) -> tuple[dict[str, Any], int]:
    db.meta.execute("CHECKPOINT")
    before_traces = int(db.in_ledger("SELECT count(*) FROM ledger_trace"))
    before = db.snapshot()
    wall = caller.run(index, calls, 1, stream)
    db.wait_traces(before_traces + calls)
    after = db.snapshot()
    statements = after.statements - before.statements
    top = sorted(((after.by_query.get(q, 0) - before.by_query.get(q, 0), q) for q in after.by_query), reverse=True)
    return {
        "calls": calls,
        "wall_ms_per_call": round(wall / calls * 1000, 2),
        "statements_per_call": round(statements / calls, 2),
        "round_trips_per_call": round(statements / calls, 2),
        "fk_checks_per_call": round((after.nested - before.nested) / calls, 2),
        "write_transactions_per_call": round((after.xacts - before.xacts) / calls, 2),
        "wal_bytes_per_call": round(db.wal_bytes(before.wal_lsn, after.wal_lsn) / calls),
        "backend_cpu_ms_per_call": round(_cpu_delta(before.backend_cpu, after.backend_cpu) / calls * 1000, 3),
        "other_pg_cpu_ms_per_call": round(_cpu_delta(before.other_cpu, after.other_cpu) / calls * 1000, 3),
        "exec_ms_per_call": round((after.exec_ms - before.exec_ms) / calls, 3),
        "statements": [f"{n / calls:.2f}× {' '.join(q.split())[:110]}" for n, q in top if n > 0],
        "loadavg": loadavg(),
    }, index + calls


def throughput(db: Database, caller: Caller, servers: list[Server], index: int, seconds: float,
               concurrency: int, stream: bool, bouncer: int | None) -> tuple[dict[str, Any], int]:
    before_traces = int(db.in_ledger("SELECT count(*) FROM ledger_trace"))
    before = db.snapshot()
    marina_before = sum(s.cpu() for s in servers)
    bouncer_before = cpu_seconds(tree(bouncer)) if bouncer else 0.0
    sent, wall = caller.run_for(index, seconds, concurrency, stream)
    db.wait_traces(before_traces + sent)
    marina = sum(s.cpu() for s in servers) - marina_before
    bouncer_cpu = cpu_seconds(tree(bouncer)) - bouncer_before if bouncer else 0.0
    after = db.snapshot()
    pg = _cpu_delta(before.backend_cpu, after.backend_cpu) + _cpu_delta(before.other_cpu, after.other_cpu)
    return {
        "concurrency": concurrency,
        "calls": sent,
        "calls_per_s": round(sent / wall, 1),
        "pg_cores": round(pg / wall, 2),
        "marina_cores": round(marina / wall, 2),
        **({"pgbouncer_cores": round(bouncer_cpu / wall, 2)} if bouncer else {}),
        "calls_per_s_per_db_core": round(sent / pg) if pg else None,
        "loadavg": loadavg(),
    }, index + sent


def ledger_check(db: Database, calls: int) -> dict[str, Any]:
    rows = db.ledger.execute(
        "SELECT (SELECT count(*) FROM ledger_trace), (SELECT count(*) FROM ledger_trace WHERE status = 'ok'),"
        " (SELECT coalesce(sum(calls), 0) FROM spend_daily), (SELECT coalesce(sum(cost_nanousd), 0) FROM spend_daily),"
        " (SELECT coalesce(sum(cost_nanousd), 0) FROM ledger_trace), (SELECT count(DISTINCT cost_nanousd) FROM ledger_trace),"
        " (SELECT min(cost_nanousd) FROM ledger_trace)"
    ).fetchone()
    assert rows is not None
    traces, ok, spend_calls, spend_cost, trace_cost, distinct_costs, unit = (int(v) if v is not None else None for v in rows)
    exact = (traces == ok == spend_calls == calls and spend_cost == trace_cost and distinct_costs == 1
             and unit is not None and spend_cost == calls * unit)
    return {"calls": calls, "traces": traces, "ok": ok, "spend_calls": spend_calls, "spend_nanousd": spend_cost,
            "trace_nanousd": trace_cost, "one_call_nanousd": unit, "exact": exact}


def run(args: argparse.Namespace, tmp: Path, admin_url: str, postmaster: int, upstream_port: int,
        bouncer: tuple[int, int] | None) -> dict[str, Any]:
    bouncer_port, bouncer_pid = bouncer or (None, None)
    dbname = "marina_pgbouncer" if bouncer_port else "marina_direct"
    db = Database(admin_url, postmaster, dbname, first=bouncer_port is None)
    pg_port = int(admin_url.rsplit(":", 1)[1])
    port = bouncer_port or pg_port
    extra = {"MARINA_RATE_LIMIT_RPS": str(args.rate_limit_rps)}
    if bouncer_port:
        extra["MARINA_PG_PREPARED_STATEMENTS"] = "false"
    url = f"postgres://postgres@127.0.0.1:{port}/{dbname}"
    migrate(marina_env(db_url=f"{admin_url}/{dbname}", upstream_port=upstream_port, bind="127.0.0.1:1", key=KEY, extra=extra))
    servers: list[Server] = []
    try:
        for n in range(args.servers):
            bind = free_port()
            servers.append(start(
                f"marina-{dbname}-{n}",
                [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"), "marina.asgi:application"],
                env=marina_env(db_url=url, upstream_port=upstream_port, bind=f"127.0.0.1:{bind}", key=KEY, extra=extra),
                base_url=f"http://127.0.0.1:{bind}", ready_path="/v1/health", log_dir=tmp,
            ))
        caller = Caller(servers)
        report: dict[str, Any] = {"via": f"PgBouncer {bouncer_port} (transaction mode)" if bouncer_port else "direct",
                                  "servers": args.servers}
        index = 0
        for stream in (False, True):
            caller.run(index, args.warmup, 8, stream)
            index += args.warmup
        db.wait_traces(index)
        for stream in (False, True):
            kind = "streamed" if stream else "plain"
            report[f"per call, {kind}"], index = per_call(db, caller, index, args.calls, stream)
        report["connections per worker (to " + ("PgBouncer" if bouncer_port else "PostgreSQL") + ")"] = \
            connections_per_worker(servers, port)
        report["PostgreSQL backends of Marina"] = int(db.one(
            f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{dbname}' AND usename = 'postgres'"))
        for stream in (False, True):
            kind = "streamed" if stream else "plain"
            for concurrency in args.concurrency:
                row, index = throughput(db, caller, servers, index, args.seconds, concurrency, stream, bouncer_pid)
                report.setdefault(f"throughput, {kind}", []).append(row)
        db.wait_traces(index)
        report["ledger"] = ledger_check(db, index)
        report["failures"] = caller.failures[:5]
        report["failed_calls"] = len(caller.failures)
        return report
    finally:
        for server in servers:
            server.stop()
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=2, help="Marina servers (2 gunicorn workers each)")
    parser.add_argument("--calls", type=int, default=300, help="calls per per-call measurement (concurrency 1)")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10, help="length of each throughput step")
    parser.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[8, 32])
    parser.add_argument("--rate-limit-rps", type=float, default=1e6, help="the rate limiter on, far off (0: off)")
    parser.add_argument("--pgbouncer", action="store_true", help="also run behind PgBouncer in transaction mode")
    parser.add_argument("--pool-size", type=int, default=20, help="PgBouncer's default_pool_size")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"# {' '.join(sys.argv)}  date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  commit {commit}  "
          f"cores {os.cpu_count()}  loadavg {loadavg()}", flush=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="marina-db-ceiling-") as name:
        tmp = Path(name)
        os.chmod(tmp, 0o755)
        upstream, upstream_port = start_fake_upstream(tmp)
        try:
            with scratch_cluster(tmp) as (admin_url, postmaster):
                print(f"# PostgreSQL {subprocess.run([str(_pg_bin() / 'postgres'), '--version'], capture_output=True, text=True).stdout.split()[2]}"
                      f" at {admin_url}", flush=True)
                results.append(run(args, tmp, admin_url, postmaster, upstream_port, None))
                print(json.dumps(results[-1], indent=1), flush=True)
                if args.pgbouncer:
                    with pgbouncer(tmp, int(admin_url.rsplit(":", 1)[1]), args.pool_size) as bouncer:
                        results.append(run(args, tmp, admin_url, postmaster, upstream_port, bouncer))
                        print(json.dumps(results[-1], indent=1), flush=True)
        finally:
            upstream.stop()
    print(f"# done, loadavg {loadavg()}")
    bad = [r["via"] for r in results if not r["ledger"]["exact"] or r["failed_calls"]]
    if bad:
        raise SystemExit(f"ledger not exact or calls failed: {', '.join(bad)}")


if __name__ == "__main__":
    main()
