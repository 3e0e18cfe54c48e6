"""What MARINA_TRACE_STORE=otel takes off the database, per call, on PostgreSQL.

    .venv/bin/python bench/trace_store.py                  # ~1 min
    .venv/bin/python bench/trace_store.py --calls 5000 --pg-admin postgres://postgres@127.0.0.1:5432

On a scratch database, the ledger writer's own function (`record_requests`,
one trace a commit: the writer when no other trace waits) writes `--calls`
traces with `db` then `otel`, twice each, for a plain call (root + one
upstream span) and a verify formation (the verify span + draft, review,
revision). Reported per call: WAL bytes (pg_current_wal_lsn before and after:
what the primary writes, ships to replicas and archives) and, after the run,
the bytes each table and its indexes hold per row. Run on a quiet machine:
the WAL figures do not depend on load, the timings (not reported) do."""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import scratch_postgres  # noqa: E402


def _trace(i: int, tag: str, kind: str) -> Any:
    from ledger.spend.records import SpanRecord, TraceRecord

    now = datetime.now(UTC)

    def call(seq: int, name: str, parent: int | None) -> SpanRecord:
        return SpanRecord(
            seq=seq, name=name, parent_seq=parent, started_at=now, duration_ms=812.5, ttft_ms=300.0, provider="openrouter",
            upstream_model="openai/gpt-5.2", http_status=200, prompt_tokens=2400, completion_tokens=90,
            cost_nanousd=123_450, cost_source="provider", detail={"verdict": "ok"} if name == "review" else {},
        )  # fmt: skip

    if kind == "plain":
        spans, model, route, label = [call(0, "upstream", None)], "openrouter/openai/gpt-5.2", "passthru", ""
    else:
        root = SpanRecord(seq=0, name="verify", started_at=now, duration_ms=2500.0, detail={"label": "approved", "rounds": 1})
        spans = [root, call(1, "draft", 0), call(2, "review", 0), call(3, "revision", 0)]
        model, route, label = "marina/verify:openrouter/openai/gpt-5.2", "verify", "approved"
    return TraceRecord(
        request_id=f"{tag}-{i}", started_at=now, path="/v1/chat/completions", duration_ms=2600.0, overhead_ms=1.2,
        key_name="bench", requested_model=model, route=route, formation_label=label, spans=spans,
        conv_seed=i, conv_opening="0123456789abcdef", conv_system="0123456789abcdef",
    )  # fmt: skip


def measure(calls: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from ledger.spend import services

    call_command("migrate", "--no-input", verbosity=0)

    def one(sql: str, *params: Any) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()[0]

    report: dict[str, Any] = {"calls": calls, "server": one("SHOW server_version"), "wal_bytes_per_call": {}}
    for kind in ("plain", "verify"):
        for store in ("db", "otel", "db", "otel"):
            settings.MARINA_TRACE_STORE = store
            tag = f"{kind}-{store}-{os.urandom(4).hex()}"
            for i in range(100):  # warm: statements prepared, pages in cache
                services.record_requests([_trace(i, f"warm-{tag}", kind)])
            before = one("SELECT pg_current_wal_lsn()")
            for i in range(calls):
                services.record_requests([_trace(i, tag, kind)])
            wal = int(one("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", before))
            report["wal_bytes_per_call"].setdefault(f"{kind} {store}", []).append(round(wal / calls))
    traces, spans = one("SELECT count(*) FROM ledger_trace"), one("SELECT count(*) FROM ledger_span")
    # Summed over the day partitions (a partitioned table itself holds no rows).
    size = "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%s)"
    report["bytes_per_trace_row"] = round(one(size, "ledger_trace") / traces)
    report["bytes_per_span_row"] = round(one(size, "ledger_span") / spans)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pg-admin", default=os.environ.get("MARINA_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432"))
    args = parser.parse_args()
    with scratch_postgres(args.pg_admin, "marina_trace_store") as url:
        os.environ.update({"DATABASE_URL": url, "MARINA_ENV_FILE": os.devnull, "MARINA_LOG_LEVEL": "WARNING"})
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
        os.environ.setdefault("MARINA_SPOOL_DIR", str(ROOT / "var" / "bench-spool"))
        report = measure(args.calls)
        from django.db import connections

        connections.close_all()  # before the scratch database is dropped
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
