"""The ledger's spool (ledger/spend/spool.py): what it costs and how fast it empties.

    .venv/bin/python bench/spool.py                    # replay rate on SQLite, 5,000 records: ~30 s
    .venv/bin/python bench/spool.py --records 20000 --pg-url postgres://postgres@127.0.0.1:5432/marina_spool_bench
    .venv/bin/python bench/spool.py --healthy-before main --runs 5   # + the healthy path, before/after, same run

Replay: a fresh database (a temporary SQLite file, or the PostgreSQL database
named by --pg-url, created, migrated and dropped); --records traces (a span
and a spend upsert each) are appended to a journal as the writer thread does
when the database does not answer (groups of 200, one fdatasync each), then
replayed through the real path (`services._replay`: request ids already
recorded skipped, 200 a transaction). Printed: append and replay rates
(records/s), and the ledger checked: traces = spend calls = records, cost exact.

Healthy path (--healthy-before REV): bench/overhead.py measures this checkout
and REV (exported with `git archive` to a temporary directory) interleaved in
one run, c=1, plain calls, SQLite: with the database answering, the spool is
one length check per group commit (and, with the daily cap on, one look at
its room per call), so the added p50s should agree within noise."""
from __future__ import annotations

import argparse
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
COST = 1_234_567  # nano-dollars per record: any drift in the sums shows


def _record(i: int) -> Any:
    from ledger.spend.records import SpanRecord, TraceRecord

    now = datetime.now(UTC)
    span = SpanRecord(
        seq=0, name="upstream", started_at=now, duration_ms=850.0, provider="openrouter",
        upstream_model="openai/gpt-4.1-mini", http_status=200, prompt_tokens=4800, completion_tokens=48,
        cost_nanousd=COST, cost_source="provider",
    )
    return TraceRecord(
        request_id=f"req-spool-{os.getpid()}-{i}", started_at=now, path="/v1/chat/completions", duration_ms=851.0,
        overhead_ms=1.0, key_name="bench", requested_model="openrouter/openai/gpt-4.1-mini", route="passthru",
        status="ok", http_status=200, spans=[span],
    )


def child(records: int, spool_dir: str) -> dict[str, Any]:
    """In a process of its own, with DATABASE_URL set: append, then replay."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    os.environ["MARINA_SPOOL_DIR"] = spool_dir
    import django

    django.setup()
    from django.db import connection

    from ledger.spend import services
    from ledger.spend.spool import spool

    traces = [_record(i) for i in range(records)]
    started = time.perf_counter()
    for i in range(0, records, services.MAX_BATCH):
        kept = spool.append(traces[i : i + services.MAX_BATCH])
        assert all(kept), "the spool is full: raise MARINA_SPOOL_MAX_BYTES"
    appended = time.perf_counter() - started
    started = time.perf_counter()
    assert services._replay(), "the database did not answer"
    replayed = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*), (SELECT COALESCE(SUM(calls), 0) FROM spend_daily),"
                       " (SELECT COALESCE(SUM(cost_nanousd), 0) FROM spend_daily) FROM ledger_trace")
        count, calls, cost = (int(v) for v in cursor.fetchone())
    assert (count, calls, cost) == (records, records, records * COST), (count, calls, cost)
    return {
        "records": records, "vendor": connection.vendor,
        "append_per_s": round(records / appended), "replay_per_s": round(records / replayed),
        "replay_seconds": round(replayed, 2), "left": len(spool),
    }  # fmt: skip


def _database(args: argparse.Namespace, tmp: Path) -> str:
    if not args.pg_url:
        return f"sqlite:///{tmp / 'spool-bench.sqlite3'}"
    import psycopg

    base, _, name = args.pg_url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return str(args.pg_url)


def replay(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="marina-spool-bench-") as tmpdir:
        tmp = Path(tmpdir)
        url = _database(args, tmp)
        env = {**os.environ, "DATABASE_URL": url, "MARINA_ENV_FILE": os.devnull}
        try:
            subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True)
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(args.records), str(tmp / "spool")],
                cwd=ROOT, env=env, check=True, capture_output=True, text=True,
            )
        finally:
            if args.pg_url:
                import psycopg

                base, _, name = args.pg_url.rpartition("/")
                with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return result


def healthy(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="marina-spool-before-") as before:
        archive = subprocess.run(["git", "archive", args.healthy_before], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", before], input=archive.stdout, check=True)
        os.symlink(ROOT / ".venv", Path(before) / ".venv")
        subprocess.run(
            [sys.executable, "bench/overhead.py", "--skip-litellm", "--modes", "plain", "--concurrency", "1",
             "--ids", "marina", "--runs", str(args.runs), "--duration", str(args.duration), "--ttfb", "",
             "--marina-variant", f"before={before}"],
            cwd=ROOT, check=True,
        )  # fmt: skip


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(int(sys.argv[2]), sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--pg-url", help="a PostgreSQL database to create, replay into and drop (default: SQLite)")
    parser.add_argument("--healthy-before", metavar="REV", help="also measure the healthy path against REV, same run")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs for --healthy-before (default 5)")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per wrk run for --healthy-before")
    args = parser.parse_args()
    print(json.dumps(replay(args)))
    if args.healthy_before:
        healthy(args)


if __name__ == "__main__":
    main()
