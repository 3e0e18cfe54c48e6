"""The daily cap's cost per upstream call (passthru/spendcap.py): a hold taken
before the call, awaited as passthru/calls.py awaits it, and released after
(as passthru/lifecycle.py does once the trace is written), on SQLite and on PostgreSQL;
against, in the same run, the cap off and the trace write every call already
pays (`ledger.spend.services.arecord_request` of a one-span trace). "cap on"
is a cap far off (calls served from the process's lease); "cap near" one
with room for the calls in flight and one more (leases without a chunk: a
transaction per call, as every call paid before leases).

    .venv/bin/python bench/spendcap.py                    # ~30 s
    .venv/bin/python bench/spendcap.py --calls 5000 --backends sqlite

For each backend: a fresh database (a temporary SQLite file; a PostgreSQL
database created, migrated and dropped), then --calls calls at concurrency 1
and 32 from one event loop, on the τ²-sized body of bench/tau2_body.py under a
cap that is never reached. Reported: wall
microseconds per call (c=1: the latency a call gains; c=32: throughput), CPU
microseconds per call of this process (event loop plus the cap's and the
writer's threads; PostgreSQL's own CPU is not counted), and the hold's ratio
to the trace write."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import per_backend, run_child  # noqa: E402


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _settled() -> None:
    """Wait until the cap's and the writer's threads have done what was queued
    (the releases are not awaited by the calls)."""
    from ledger.spend import services
    from passthru import spendcap

    spendcap.submit(lambda: None).result()
    services.submit(lambda: None).result()


async def _run(calls: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> tuple[float, float]:
    counter = iter(range(calls))

    async def worker() -> None:
        for i in counter:
            await one(i)

    cpu, wall = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await asyncio.get_running_loop().run_in_executor(None, _settled)
    return (time.perf_counter() - wall) / calls * 1e6, (_cpu() - cpu) / calls * 1e6


def _trace(i: int) -> Any:
    from ledger.spend.records import SpanRecord, TraceRecord

    now = datetime.now(UTC)
    span = SpanRecord(
        seq=0, name="upstream", started_at=now, duration_ms=850.0, provider="openrouter",
        upstream_model="openai/gpt-5.2", http_status=200, prompt_tokens=4800, completion_tokens=48,
        cost_nanousd=10, cost_source="provider",
    )
    return TraceRecord(
        request_id=f"req-bench-{uuid.uuid4().hex[:8]}-{i}", started_at=now, path="/v1/chat/completions",
        duration_ms=851.0, overhead_ms=1.0, key_name="bench", requested_model="openrouter/openai/gpt-5.2",
        route="passthru", session="bench", status="ok", http_status=200, spans=[span],
    )


def child(calls: int) -> dict[str, Any]:
    """In a process of its own (DATABASE_URL set): migrate, then measure."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from bench.tau2_body import body as tau2_body
    from ledger.spend import services
    from passthru import spendcap
    from passthru.calls import encode

    call_command("migrate", "--no-input", verbosity=0)
    body = tau2_body("openai/gpt-5.2")
    size = len(encode(body))

    async def hold(i: int) -> None:
        held = await spendcap.hold("openrouter", "openai/gpt-5.2", body, size)
        # Released as if it had cost its estimate (no trace is written here: spend_daily stays 0).
        spendcap.release([held] if held is not None else [], held.nanousd if held is not None else 0)

    async def trace(i: int) -> None:
        await services.arecord_request(_trace(i))

    estimate = Decimal(spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", body, size)) / 10**9
    results: dict[str, Any] = {"estimate_usd": str(estimate)}
    for label, cap, one in (
        ("cap off", None, hold), ("cap on", Decimal("1000000"), hold), ("cap near", None, hold), ("trace write", None, trace)
    ):
        settings.MARINA_DAILY_SPEND_CAP_USD = cap
        asyncio.run(_run(200, 1, one))  # warm-up: connections, price tables
        for concurrency in (1, 32):
            if label == "cap near":  # room for the calls in flight and one more: leases without a chunk, a transaction per call
                settings.MARINA_DAILY_SPEND_CAP_USD = estimate * (concurrency + 1)
            wall, cpu = asyncio.run(_run(calls, concurrency, one))
            results[f"{label} c={concurrency}"] = {"wall_us": round(wall, 1), "cpu_us": round(cpu, 1)}
    spendcap.close_connection()
    services.close_writer_connection()
    for concurrency in (1, 32):
        for label in ("cap on", "cap near"):
            on, write = results[f"{label} c={concurrency}"], results[f"trace write c={concurrency}"]
            results[f"ratio {label} c={concurrency}"] = {
                "wall": round(on["wall_us"] / write["wall_us"], 2), "cpu": round(on["cpu_us"] / write["cpu_us"], 2)
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument(
        "--pg-admin-url", default=os.environ.get("MARINA_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.calls)))
        return
    report = per_backend(args.backends, args.pg_admin_url, "marina_spendcap_bench", lambda url: run_child(__file__, url, "--child", "--calls", str(args.calls)))
    for backend, rows in report.items():
        print(f"{backend}: (the hold's estimate for the τ² body: ${rows.pop('estimate_usd')})")
        for label, row in rows.items():
            if label.startswith("ratio"):
                print(f"  hold ({label[6:]}) / trace write: {row['wall']}× wall, {row['cpu']}× CPU")
            else:
                print(f"  {label:17} {row['wall_us']:8.1f} µs wall/call  {row['cpu_us']:8.1f} µs CPU/call")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
