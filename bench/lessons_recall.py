"""Lesson recall with 10,000 lessons: `ledger.lessons.services.recall` (the
full-text query, trusted-first pick and budget) on SQLite and on PostgreSQL,
against a primary-key read of one lesson on the same connection in the same
run (the baseline: what any database round trip costs here).

    .venv/bin/python bench/lessons_recall.py                  # ~1 min
    .venv/bin/python bench/lessons_recall.py --lessons 10000 --queries 500 --backends sqlite

For each backend: a fresh database (a temporary SQLite file; a PostgreSQL
database created, migrated and dropped), --lessons synthetic rules of 80-300
characters (a Zipf-distributed vocabulary of 3,000 words, with the words of
customer-service requests the most common, so common query words match
thousands of lessons: the hard case for ranking), a fifth of them trusted,
across two benchmarks and the tools/code/meta domains; then --queries
request texts of ~500 characters from the same vocabulary. Reported per
recall: p50 and p95 milliseconds, directly (the query) and as a request
awaits it (passthru.formations.lessons.recall, on the state thread), with
and without measurement self-exclusion, and the ratio to the baseline's p50.
PostgreSQL's table is ANALYZEd after the load, as autovacuum soon would
(without statistics its planner may rank every matching row: ~20 ms).
The target (issue 14): p50 under 5 ms."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common import per_backend, run_child  # bench/ is on sys.path when a bench runs as a script

ROOT = Path(__file__).resolve().parent.parent

COMMON = (
    "reservation flight booking cancel change user agent policy confirm payment refund gift card certificate "
    "checked bags baggage cabin economy business basic upgrade downgrade passenger insurance membership gold "
    "silver regular fare price difference order item exchange return address shipping pending delivered "
    "tool call arguments lookup details before after always never ask explicit yes transfer human"
).split()


def vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    made = {"".join(rng.choice(letters) for _ in range(rng.randint(4, 10))) for _ in range(size * 2)}
    return COMMON + sorted(made)[: size - len(COMMON)]


def text(words: list[str], weights: list[float], rng: random.Random, chars: int) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choices(words, weights)[0])
    return " ".join(out)[:chars]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def timed(fn: Any, queries: list[str]) -> list[float]:
    out = []
    for query in queries:
        started = time.perf_counter()
        fn(query)
        out.append((time.perf_counter() - started) * 1000)
    return out


def child(lessons: int, queries: int) -> dict[str, Any]:
    """In a process of its own (DATABASE_URL set): migrate, fill, measure."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from ledger.lessons import services
    from ledger.models import Lesson
    from passthru.context import Inbound, RequestContext
    from passthru.formations import lessons as request_recall
    from passthru.formations import state

    call_command("migrate", "--no-input", verbosity=0)
    rng = random.Random(14)
    words = vocabulary(3000, rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    domains = ["tools", "tools", "code", "code", "meta"]
    Lesson.objects.bulk_create(
        [
            Lesson(
                rule=text(words, weights, rng, rng.randint(80, 300)),
                domain=domains[i % len(domains)],
                trust="trusted" if i % 5 == 0 else "unverified",
                benchmark="tau2-airline" if i % 2 else "tau2-retail",
            )
            for i in range(lessons)
        ],
        batch_size=1000,
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # what autovacuum does soon after a bulk load
            cursor.execute("ANALYZE ledger_lesson")
    asked = [text(words, weights, rng, 500) for _ in range(queries)]
    ids = list(Lesson.objects.values_list("id", flat=True))
    picked = [services.recall(q) for q in asked[:50]]  # warm-up: statements, caches
    found = sum(len(p) for p in picked) / len(picked)

    def baseline(_: str) -> None:
        Lesson.objects.filter(pk=rng.choice(ids)).values_list("id", "rule").first()

    def through_request(query: str) -> None:
        ctx = RequestContext.for_request(Inbound("POST", "/v1/chat/completions", {}, b""))
        loop.run_until_complete(request_recall.recall(ctx, query, "on", query="bench"))

    loop = asyncio.new_event_loop()
    through_request(asked[0])  # warm the state thread's connection
    runs = {
        "baseline (pk read)": timed(baseline, asked),
        "recall": timed(services.recall, asked),
        "recall, measurement": timed(lambda q: services.recall(q, exclude_benchmark="tau2-airline"), asked),
        "recall as a request awaits it": timed(through_request, asked),
    }
    loop.close()
    state.close_connection()
    base = statistics.median(runs["baseline (pk read)"])
    return {
        "lessons": Lesson.objects.count(),
        "recalled_per_query": round(found, 2),
        **{
            name: {
                "p50_ms": round(statistics.median(ms), 3),
                "p95_ms": round(percentile(ms, 0.95), 3),
                "x_baseline": round(statistics.median(ms) / base, 1),
            }
            for name, ms in runs.items()
        },
    }


def measure(database_url: str, lessons: int, queries: int) -> dict[str, Any]:
    return run_child(__file__, database_url, "--child", "--lessons", str(lessons), "--queries", str(queries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-admin-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.lessons, args.queries)))
        return
    report = per_backend(
        args.backends, args.pg_admin_url, "marina_lessons_bench", lambda url: measure(url, args.lessons, args.queries)
    )
    for backend, rows in report.items():
        print(f"{backend}: {rows['lessons']} lessons, {rows['recalled_per_query']} recalled per query")
        for label, row in rows.items():
            if isinstance(row, dict):
                verdict = "" if label.startswith("baseline") else ("  (< 5 ms)" if row["p50_ms"] < 5 else "  (OVER 5 ms)")
                print(f"  {label:32} p50 {row['p50_ms']:7.3f} ms  p95 {row['p95_ms']:7.3f} ms  {row['x_baseline']:6.1f}x baseline{verdict}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
