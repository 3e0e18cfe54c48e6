"""The rate limiter's cost per request: `passthru.ratelimit.check()` awaited
the way the chat route awaits it, on SQLite and on PostgreSQL, against the
limiter off (the default) in the same run.

    .venv/bin/python bench/ratelimit.py                    # ~20 s
    .venv/bin/python bench/ratelimit.py --checks 5000 --backends sqlite

For each backend: a fresh database (a temporary SQLite file; a PostgreSQL
database created, migrated and dropped), then --checks checks at concurrency 1
and 32 from one event loop, clients spread over 64 keys (the bucket never
empties: every check is the allowed path, the one every request takes).
Reported: wall microseconds per check (c=1: the latency a request gains;
c=32: throughput) and CPU microseconds per check of this process (event loop
plus the limiter thread; PostgreSQL's own CPU is not counted).

It also times, in-process, the per-request routing and body preparation
(`providers.plan` + `bodyprep.prepare` on the τ²-sized body of
bench/tau2_body.py, for an explicit id and for an unprefixed one)."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import per_backend, run_child  # noqa: E402


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _run(checks: int, concurrency: int) -> tuple[float, float]:
    from passthru import ratelimit

    clients = [f"key:bench-{i}" for i in range(64)]
    counter = iter(range(checks))

    async def worker() -> None:
        for i in counter:
            await ratelimit.check(clients[i % len(clients)])

    cpu, wall = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.perf_counter() - wall) / checks * 1e6, (_cpu() - cpu) / checks * 1e6


def routing(rounds: int = 20_000) -> dict[str, float]:
    """Microseconds per request of plan() + prepare() for two kinds of id."""
    from django.conf import settings

    from bench.tau2_body import body as tau2_body
    from passthru.bodyprep import prepare
    from passthru.providers import plan

    for name in ("openrouter", "openai", "anthropic"):
        settings.MARINA_PROVIDERS[name]["api_key"] = "sk-bench"
    out = {}
    for model in ("openrouter/openai/gpt-4.1-mini", "gpt-4.1-mini"):
        request = tau2_body(model)
        started = time.perf_counter()
        for _ in range(rounds):
            route = plan(model).routes[0]
            prepare(route, request)
        out[model] = round((time.perf_counter() - started) / rounds * 1e6, 1)
    return out


def child(checks: int) -> dict[str, Any]:
    """In a process of its own (DATABASE_URL set): migrate, then measure."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", "--no-input", verbosity=0)
    results: dict[str, Any] = {}
    for label, rps in (("off", 0.0), ("on", 1e6)):
        settings.MARINA_RATE_LIMIT_RPS = rps
        settings.MARINA_RATE_LIMIT_BURST = 10**9
        asyncio.run(_run(200, 1))  # warm-up: connection, statements, buckets
        for concurrency in (1, 32):
            wall, cpu = asyncio.run(_run(checks, concurrency))
            results[f"{label} c={concurrency}"] = {"wall_us": round(wall, 1), "cpu_us": round(cpu, 1)}
    from passthru import ratelimit

    ratelimit.close_connection()
    results["routing_us"] = routing()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=3000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-admin-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.checks)))
        return
    report = per_backend(args.backends, args.pg_admin_url, "marina_ratelimit_bench", lambda url: run_child(__file__, url, "--child", "--checks", str(args.checks)))
    for backend, rows in report.items():
        print(f"{backend}:")
        for label, row in rows.items():
            if label == "routing_us":
                print(f"  plan + prepare per request: {row} µs")
                continue
            print(f"  {label:8} {row['wall_us']:8.1f} µs wall/check  {row['cpu_us']:8.1f} µs CPU/check")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
