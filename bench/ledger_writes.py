"""Ledger writes: sustained calls per second, each with its trace, its span and
its spend_daily upsert, on SQLite and on PostgreSQL, measured the same way.

    .venv/bin/python bench/ledger_writes.py                       # both backends, 1 and 32 per process: ~1.5 minutes
    .venv/bin/python bench/ledger_writes.py --backends sqlite --seconds 3
    .venv/bin/python bench/ledger_writes.py --pg-url postgres://postgres@127.0.0.1:5432/marina_perf_bench

Each backend gets a fresh database (a temporary SQLite file; the PostgreSQL
database named in --pg-url is created, migrated and dropped). Then --processes
writer processes (2, like gunicorn's workers) each run --concurrency asyncio
tasks (default 1 and 32) that record calls through the real path, `ledger.spend.services.arecord_request`
(the writer thread, group commit, the trace_writer SQL), awaiting each commit
as the chat route does. Afterwards the ledger is checked: traces = spans =
spend_daily calls = calls recorded, and the summed cost is exact."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COST = 1_234_567  # nano-dollars per call: any drift in the sums shows


def _setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    import django

    django.setup()


def _record(i: int, pid: int) -> Any:
    from ledger.spend.records import SpanRecord, TraceRecord

    now = datetime.now(UTC)
    span = SpanRecord(
        seq=0, name="upstream", started_at=now, duration_ms=850.0, provider="openrouter",
        upstream_model="openai/gpt-4.1-mini", http_status=200, prompt_tokens=4800, completion_tokens=48,
        cost_nanousd=COST, cost_source="provider",
    )
    return TraceRecord(
        request_id=f"req-{pid}-{i}", started_at=now, path="/v1/chat/completions", duration_ms=851.0,
        overhead_ms=1.0, key_name="bench", requested_model="openrouter/openai/gpt-4.1-mini", route="passthru",
        session="bench", status="ok", http_status=200, spans=[span],
    )


def child_write(concurrency: int, seconds: float, start_at: float) -> dict[str, Any]:
    """One writer process: record calls for `seconds`; report counts, latency and CPU."""
    _setup_django()
    from ledger.spend import services

    async def main() -> dict[str, Any]:
        latencies: list[float] = []
        pid = os.getpid()
        counter = iter(range(10**9))
        await services.arecord_request(_record(next(counter), pid))  # open the connection first
        latencies.clear()
        delay = start_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)  # all processes start together
        stop = time.monotonic() + seconds
        cpu0 = os.times()

        async def task() -> None:
            while time.monotonic() < stop:
                t = time.perf_counter()
                await services.arecord_request(_record(next(counter), pid))
                latencies.append(time.perf_counter() - t)

        await asyncio.gather(*(task() for _ in range(concurrency)))
        cpu1 = os.times()
        latencies.sort()
        n = len(latencies)
        return {
            "calls": n + 1,  # plus the first one
            "measured": n,
            "p50_ms": latencies[n // 2] * 1000 if n else 0,
            "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else 0,
            "cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
        }

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


def child_verify() -> dict[str, Any]:
    _setup_django()
    from django.db.models import Sum

    from ledger.models import Span, SpendDaily, Trace

    return {
        "traces": Trace.objects.count(),
        "spans": Span.objects.count(),
        "spend_calls": SpendDaily.objects.aggregate(n=Sum("calls"))["n"] or 0,
        "spend_cost": SpendDaily.objects.aggregate(c=Sum("cost_nanousd"))["c"] or 0,
        "trace_cost": Trace.objects.aggregate(c=Sum("cost_nanousd"))["c"] or 0,
    }


def _run_child(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, "--child", *args], env=env, stdout=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"a bench child failed (exit {proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def _pg_admin(url: str, sql: str) -> None:
    import psycopg

    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql)


def bench_backend(name: str, db_url: str, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    """One measured run on a freshly migrated, empty database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARINA_")}
    env.update({"DATABASE_URL": db_url, "MARINA_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)})
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    start_at = time.time() + 3  # time for every child to import Django
    procs = [
        _run_child(env, "write", str(concurrency), str(args.seconds), str(start_at)) for _ in range(args.processes)
    ]
    parts = [_result(p) for p in procs]
    check = _result(_run_child(env, "verify"))
    calls = sum(p["calls"] for p in parts)
    measured = sum(p["measured"] for p in parts)
    exact = (
        check["traces"] == check["spans"] == check["spend_calls"] == calls
        and check["spend_cost"] == check["trace_cost"] == calls * COST
    )
    return {
        "backend": name,
        "concurrency": concurrency,
        "calls_per_s": measured / args.seconds,
        "p50_ms": max(p["p50_ms"] for p in parts),
        "p99_ms": max(p["p99_ms"] for p in parts),
        "cpu_ms_per_call": sum(p["cpu_s"] for p in parts) * 1000 / max(measured, 1),
        "calls": calls,
        "ledger": check,
        "exact": exact,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind = sys.argv[2]
        result = child_write(int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])) if kind == "write" else child_verify()
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--processes", type=int, default=2, help="writer processes, like gunicorn workers (default 2)")
    parser.add_argument("--concurrency", default="1,32", help="concurrent calls per process, a comma list (default 1,32)")
    parser.add_argument("--pg-url", default=os.environ.get("MARINA_BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/marina_perf_bench"))
    args = parser.parse_args()

    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    for backend in args.backends.split(","):
        for c in levels:
            if backend == "sqlite":
                with tempfile.TemporaryDirectory(prefix="marina-ledger-bench-") as tmp:
                    rows.append(bench_backend("SQLite (WAL)", f"sqlite:///{tmp}/ledger.sqlite3", c, args))
            elif backend == "postgres":
                dbname = args.pg_url.rsplit("/", 1)[1]
                try:
                    _pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{dbname}"')
                    _pg_admin(args.pg_url, f'CREATE DATABASE "{dbname}"')
                except Exception as exc:  # report it and go on with the other backend
                    print(f"PostgreSQL skipped: cannot create {dbname}: {exc}", file=sys.stderr)
                    break
                try:
                    rows.append(bench_backend("PostgreSQL", args.pg_url, c, args))
                finally:
                    _pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            else:
                raise SystemExit(f"unknown backend {backend!r}: use sqlite and/or postgres")

    print(f"\n## Ledger writes ({args.processes} writer processes, {args.seconds:g} s per run, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f})\n")
    print("| backend | concurrent calls per process | calls/s | commit p50 ms | commit p99 ms | writer CPU ms/call | ledger exact |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        led = r["ledger"]
        print(f"| {r['backend']} | {r['concurrency']} | {r['calls_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['cpu_ms_per_call']:.3f} | {'yes' if r['exact'] else 'NO'} ({led['traces']} traces = "
              f"{led['spend_calls']} spend calls = {r['calls']} recorded) |")
    by = {(r["backend"], r["concurrency"]): r for r in rows}
    for c in levels:
        lite, pg = by.get(("SQLite (WAL)", c)), by.get(("PostgreSQL", c))
        if lite and pg and lite["calls_per_s"]:
            print(f"\nPostgreSQL ÷ SQLite at {c} per process: {pg['calls_per_s'] / lite['calls_per_s']:.2f}× the calls/s, "
                  f"{pg['p50_ms'] / lite['p50_ms']:.2f}× the p50 commit time (PostgreSQL's own CPU not counted)")
    if not all(r["exact"] for r in rows):
        raise SystemExit("the ledger does not match the calls recorded")


if __name__ == "__main__":
    main()
