"""Soak Marina: concurrency 128 for 60 s of plain, streamed and tool-call
requests through real gunicorn servers, then check the ledger to the call
and the nano-dollar (the reliability issue's full-length load run; the CI
test tests/e2e/test_load.py is the same check, shorter).

    .venv/bin/python bench/soak.py                       # 1 server, SQLite, 60 s
    .venv/bin/python bench/soak.py --servers 2 --postgres  # scale-out on one PostgreSQL

Prints the load summary and the ledger comparison; exits 1 if any request
went unanswered, any count differs, the cost is off by a nano-dollar, a
worker died, or a key shows up in a log or the database.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import MARINA_KEY
from tests.e2e.conftest import find_secrets, server_env
from tests.e2e.load import cost_nanousd, run_load, summary
from tests.e2e.servers import SqliteTemplate, postgres_database, start_gunicorn
from tests.e2e.upstream_process import upstream_process


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--servers", type=int, default=1, help="gunicorn servers sharing the database")
    parser.add_argument("--workers", type=int, default=2, help="workers per server")
    parser.add_argument("--postgres", action="store_true", help="a fresh PostgreSQL database instead of SQLite")
    args = parser.parse_args()

    failures: list[str] = []
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="marina-soak-")))
        ledger = (
            stack.enter_context(postgres_database("marina_soak")) if args.postgres else SqliteTemplate(work).new(work / "soak.sqlite3")
        )
        upstream_url = stack.enter_context(upstream_process())
        servers = []
        for n in range(args.servers):
            env = server_env(upstream_url)
            servers.append(start_gunicorn(database_url=ledger.url, log_path=work / f"gunicorn-{n}.log", env=env, workers=args.workers))
            stack.callback(servers[-1].terminate)
        workers = [s.worker_pids() for s in servers]
        print(f"soak: {args.servers} server(s) x {args.workers} workers on {'PostgreSQL' if args.postgres else 'SQLite'}, "
              f"concurrency {args.concurrency} for {args.seconds:g} s", flush=True)

        started = time.monotonic()
        outcomes = asyncio.run(
            run_load([s.base_url for s in servers], MARINA_KEY, concurrency=args.concurrency, seconds=args.seconds)
        )
        elapsed = time.monotonic() - started
        stats = summary(outcomes)
        print(f"load: {stats} in {elapsed:.1f} s ({len(outcomes) / elapsed:.0f} requests/s)")

        totals = ledger.totals()
        expected_cost = sum(cost_nanousd(o.index) for o in outcomes)
        print(f"ledger: {totals}; sent {len(outcomes)}, expected cost {expected_cost} nano-USD")
        if stats["ok"] != len(outcomes):
            failures.append(f"{len(outcomes) - stats['ok']} requests were not answered in full")
        for name in ("traces", "spans", "spend_calls"):
            if totals[name] != len(outcomes):
                failures.append(f"{name} = {totals[name]}, sent {len(outcomes)}")
        for name in ("spend_cost", "span_cost", "trace_cost"):
            if totals[name] != expected_cost:
                failures.append(f"{name} = {totals[name]}, expected {expected_cost}")
        for server, before in zip(servers, workers):
            if server.worker_pids() != before:
                failures.append(f"a worker of {server.base_url} died")
        for server in servers:
            server.terminate()
            if find_secrets(server.log()):
                failures.append(f"a key appears in {server.log_path}")
        if find_secrets(ledger.dump()):
            failures.append("a key appears in the database")

    for failure in failures:
        print("FAIL:", failure)
    print("soak: ok" if not failures else f"soak: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
