"""What scoped reads cost `GET /api/traces/<id>`: a key that reads only its own
traces (the key-name condition added to the one query) against a key made with
`create_key --read-all` (no condition), in the same run, interleaved.

    .venv/bin/python bench/scoped_reads.py                       # ~1 min
    .venv/bin/python bench/scoped_reads.py --traces 50000 --runs 7 --backends sqlite

For each backend: a fresh database (a temporary SQLite file; a PostgreSQL
database created, migrated and dropped) holding --traces traces of 4 spans
each, spread over 20 keys and an operator key's callers (`ops/agent-N`).
Each run then reads --requests traces with each reader through Django's test
client (URL routing, the NinjaAPI, the key check, the query, the JSON), the
two readers alternating request by request on the same ids, and takes each
reader's median. Reported per run: both medians and scoped ÷ read-all; then the
median of those same-run ratios (1.00 = no measurable cost)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import per_backend, run_child  # noqa: E402

KEYS = [f"team-{n:02d}" for n in range(20)]


def _seed(traces: int) -> list[tuple[str, str]]:
    """--traces traces through the ledger's own writer SQL; (request id, key name) of each."""
    from django.db import transaction

    from ledger.spend.records import SpanRecord, TraceRecord
    from ledger.spend.trace_writer import insert_traces

    start = datetime.now(UTC) - timedelta(days=1)
    owners = [*KEYS, *(f"ops/agent-{n}" for n in range(5))]
    made: list[tuple[str, str]] = []
    batch: list[TraceRecord] = []
    for n in range(traces):
        key = owners[n % len(owners)]
        at = start + timedelta(milliseconds=n)
        spans = [
            SpanRecord(seq=s, name="upstream", started_at=at, provider="openrouter", upstream_model="m",
                       http_status=200, prompt_tokens=100, completion_tokens=10, cost_nanousd=1000, cost_source="provider")
            for s in range(4)
        ]  # fmt: skip
        request_id = f"bench-{n:08d}"
        batch.append(TraceRecord(request_id=request_id, started_at=at, path="/v1/chat/completions",
                                 requested_model="openrouter/m", key_name=key, spans=spans))  # fmt: skip
        made.append((request_id, key))
        if len(batch) == 2000:
            with transaction.atomic():
                insert_traces(batch)
            batch = []
    if batch:
        with transaction.atomic():
            insert_traces(batch)
    return made


def child(traces: int, requests: int, runs: int) -> dict[str, Any]:
    """In a process of its own (DATABASE_URL set): migrate, seed, measure."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client

    from passthru import auth

    call_command("migrate", "--no-input", verbosity=0)
    settings.MODEL_API_KEYS = ""
    settings.ALLOWED_HOSTS = ["*"]
    made = _seed(traces)
    secrets = {key: auth.create_key(key) for key in ["ops", *KEYS]}
    everyone = auth.create_key("auditor", reads_all=True)
    client = Client(HTTP_HOST="127.0.0.1")

    def owner_of(key_name: str) -> str:
        return key_name.split("/", 1)[0]

    def get(request_id: str, secret: str) -> float:
        began = time.perf_counter()
        response = client.get(f"/api/traces/{request_id}", HTTP_AUTHORIZATION=f"Bearer {secret}")
        took = time.perf_counter() - began
        assert response.status_code == 200, response.content[:200]
        return took * 1e6

    step = max(1, len(made) // requests)
    sample = made[::step][:requests]
    for request_id, key in sample[:100]:  # warm-up: key cache, statements, page cache
        get(request_id, everyone)
        get(request_id, secrets[owner_of(key)])
    results = []
    for run in range(runs):
        scoped, unscoped = [], []
        for n, (request_id, key) in enumerate(sample):
            pair = [(unscoped, everyone), (scoped, secrets[owner_of(key)])]
            for times, secret in pair if (n + run) % 2 == 0 else reversed(pair):  # alternate which goes first
                times.append(get(request_id, secret))
        a, b = statistics.median(unscoped), statistics.median(scoped)
        results.append({"run": run + 1, "read_all_us": round(a, 1), "scoped_us": round(b, 1), "ratio": round(b / a, 3)})
    # The query alone (what the scope changes), interleaved the same way.
    from ledger.reports.selectors import trace_for

    query = []
    for run in range(runs):
        bare, scoped_q = [], []
        for n, (request_id, key) in enumerate(sample):
            arms = [(bare, None), (scoped_q, owner_of(key))]
            for times, owner in arms if (n + run) % 2 == 0 else reversed(arms):
                began = time.perf_counter()
                assert trace_for(request_id, owner) is not None
                times.append((time.perf_counter() - began) * 1e6)
        a, b = statistics.median(bare), statistics.median(scoped_q)
        query.append({"run": run + 1, "read_all_us": round(a, 1), "scoped_us": round(b, 1), "ratio": round(b / a, 3)})
    # the other key's trace is a 404, as an unknown one
    foreign = next(rid for rid, key in made if owner_of(key) != "team-00")
    assert client.get(f"/api/traces/{foreign}", HTTP_AUTHORIZATION=f"Bearer {secrets['team-00']}").status_code == 404
    return {"traces": traces, "requests": len(sample), "runs": results,
            "median_ratio": round(statistics.median(r["ratio"] for r in results), 3),
            "query": query, "query_median_ratio": round(statistics.median(r["ratio"] for r in query), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-admin-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.traces, args.requests, args.runs)))
        return
    report = per_backend(
        args.backends, args.pg_admin_url, "marina_scoped_reads_bench",
        lambda url: run_child(__file__, url, "--child", "--traces", str(args.traces),
                              "--requests", str(args.requests), "--runs", str(args.runs)),
    )  # fmt: skip
    for backend, found in report.items():
        print(f"{backend}: {found['traces']:,} traces, {found['requests']} reads per reader per run")
        for row in found["runs"]:
            print(f"  run {row['run']}: read-all {row['read_all_us']:8.1f} µs  scoped {row['scoped_us']:8.1f} µs  ratio {row['ratio']:.3f}")
        print(f"  median same-run ratio scoped ÷ read-all: {found['median_ratio']:.3f}")
        for row in found["query"]:
            print(f"  the query alone, run {row['run']}: {row['read_all_us']:7.1f} µs  scoped {row['scoped_us']:7.1f} µs  ratio {row['ratio']:.3f}")
        print(f"  the query alone, median same-run ratio: {found['query_median_ratio']:.3f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
