"""Traces partitioned by day against plain tables, at 2M traces on PostgreSQL.

Two databases filled alike by bench/reports_scale.py (2,000,000 traces and
6,000,000 spans over 90 days, 1,000 runs): one migrated with
MARINA_TRACE_PARTITIONS on (the default: 90 day partitions and the days
ahead), one with it off (the tables as before migration 0015). Then, on each:

1. the trace write: calls recorded one at a time through the real path
   (`ledger.spend.services.record_requests`, one statement per call), a plain
   call (1 span) and a verify-like one (3 spans); p50 wall time and the
   PostgreSQL backend's CPU per call (/proc), interleaved runs;
2. retention: `manage.py prune_traces --before` the 11th day, deleting the
   oldest 10 days (~222,000 traces): wall time and WAL bytes;
3. on the plain database, `manage.py trace_partitions --convert`: the
   migration's conversion at 2M traces.

    .venv/bin/python bench/partitions.py                       # ~8 minutes
    .venv/bin/python bench/partitions.py --pg-admin postgres://postgres@127.0.0.1:5432 --runs 3

The databases are dropped at the end. The report pages on both: bench/reports_scale.py."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import run_child, scratch_postgres  # noqa: E402  (the path above comes first)


def _env(url: str, partitions: bool) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": url, "MARINA_ENV_FILE": os.devnull,
            "MARINA_TRACE_PARTITIONS": "on" if partitions else "off"}  # fmt: skip


def fill(url: str, partitions: bool) -> float:
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "bench/reports_scale.py", "--database", "postgres", "--database-url", url, "--only", "::"],
        cwd=ROOT, env=_env(url, partitions), check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - began


def manage(url: str, *args: str) -> tuple[float, str]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=_env(url, True), check=True,
                          capture_output=True, text=True)  # fmt: skip
    return time.monotonic() - began, done.stdout.strip()


def one(url: str, sql: str) -> Any:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None


def writes(url: str, calls: int, spans: int) -> dict[str, float]:
    result: dict[str, float] = run_child(__file__, url, "--worker", str(calls), str(spans))
    return result


def worker(calls: int, spans: int) -> None:
    """In a process of its own: record `calls` traces of `spans` spans, one at a time."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    import django

    django.setup()
    from django.db import connection

    from ledger.spend import services
    from ledger.spend.records import SpanRecord, TraceRecord

    tag = os.urandom(4).hex()

    def record(n: int) -> TraceRecord:
        now = datetime.now(UTC)
        return TraceRecord(
            request_id=f"bench-{tag}-{n}", started_at=now, path="/v1/chat/completions", duration_ms=5.0,
            spans=[SpanRecord(seq=s + 1, name="upstream", started_at=now, provider="openrouter", upstream_model="m",
                              http_status=200, prompt_tokens=10, completion_tokens=5, cost_nanousd=1_000)
                   for s in range(spans)],
        )  # fmt: skip

    for n in range(200):  # warm: the statement prepared, the partitions' relations cached
        services.record_requests([record(n)])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before, times = cpu(), []
    for n in range(200, 200 + calls):
        began = time.perf_counter()
        services.record_requests([record(n)])
        times.append(time.perf_counter() - began)
    print(json.dumps({"p50_ms": statistics.median(times) * 1000, "backend_cpu_ms": (cpu() - before) / calls * 1000}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-admin", default=os.environ.get("MARINA_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432"))
    parser.add_argument("--runs", type=int, default=3, help="interleaved write runs per database (default 3)")
    parser.add_argument("--calls", type=int, default=3000, help="calls per write run (default 3000)")
    parser.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    with scratch_postgres(args.pg_admin, "marina_parts_on") as on, scratch_postgres(args.pg_admin, "marina_parts_off") as off:
        dbs = {"partitioned": (on, True), "plain": (off, False)}
        for name, (url, partitioned) in dbs.items():
            print(f"{name}: filled in {fill(url, partitioned):.0f} s", flush=True)
        for name, (url, _) in dbs.items():
            days = one(url, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'ledger_trace'::regclass")
            print(f"{name}: {one(url, 'SELECT count(*) FROM ledger_trace'):,} traces, {days} partitions", flush=True)

        print("\nthe trace write, one call at a time (p50 ms / PostgreSQL backend CPU ms per call):", flush=True)
        figures: dict[str, dict[int, list[dict[str, float]]]] = {name: {1: [], 3: []} for name in dbs}
        for run in range(args.runs):
            for spans in (1, 3):
                for name, (url, _) in dbs.items():
                    got = writes(url, args.calls, spans)
                    figures[name][spans].append(got)
                    print(f"  run {run + 1} {name:12} {spans} span(s): p50 {got['p50_ms']:.3f}  "
                          f"cpu {got['backend_cpu_ms']:.3f}  (load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
        for spans in (1, 3):
            line = []
            for name in dbs:
                runs = figures[name][spans]
                p50 = statistics.median(r["p50_ms"] for r in runs)
                cpu = statistics.median(r["backend_cpu_ms"] for r in runs)
                line.append(f"{name} {p50:.3f} ms / {cpu:.3f} ms CPU")
            print(f"  median, {spans} span(s): " + "; ".join(line), flush=True)

        print("\nretention: the oldest 10 days", flush=True)
        for name, (url, _) in dbs.items():
            first = one(url, "SELECT min(started_at) FROM ledger_trace")
            before = (first + timedelta(days=10)).strftime("%Y-%m-%d")
            lsn = one(url, "SELECT pg_current_wal_lsn()")
            seconds, said = manage(url, "prune_traces", "--before", before)
            wal = one(url, f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn}')")
            print(f"  {name:12} {seconds:7.1f} s  {int(wal) / 2**20:8.1f} MiB of WAL  ({said})", flush=True)

        seconds, said = manage(off, "trace_partitions", "--convert")
        print(f"\nthe conversion of the plain database ({one(off, 'SELECT count(*) FROM ledger_trace'):,} traces "
              f"left): {seconds:.1f} s  ({said})")  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
