"""Writes to the ledger. `record_request` is the one function passthru calls."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import defaultdict
from datetime import date

from django.db import close_old_connections, connection, transaction

from ledger.models import Span, Trace
from ledger.records import SpanRecord, TraceRecord

_SPEND_UPSERT = """
INSERT INTO spend_daily (day, key_name, requested_model, provider, upstream_model, calls, errors,
    unpriced_calls, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost_nanousd)
VALUES (%s, %s, %s, %s, %s, 1, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (day, key_name, requested_model, provider, upstream_model) DO UPDATE SET
    calls = spend_daily.calls + 1,
    errors = spend_daily.errors + excluded.errors,
    unpriced_calls = spend_daily.unpriced_calls + excluded.unpriced_calls,
    prompt_tokens = spend_daily.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = spend_daily.completion_tokens + excluded.completion_tokens,
    cached_tokens = spend_daily.cached_tokens + excluded.cached_tokens,
    reasoning_tokens = spend_daily.reasoning_tokens + excluded.reasoning_tokens,
    cost_nanousd = spend_daily.cost_nanousd + excluded.cost_nanousd
"""


def _spend_row(trace: TraceRecord, span: SpanRecord) -> tuple[object, ...]:
    day: date = span.started_at.date()  # started_at is UTC: Marina runs with TIME_ZONE=UTC
    return (
        day,
        trace.key_name,
        trace.requested_model,
        span.provider,
        span.upstream_model,
        0 if span.status == "ok" else 1,
        1 if span.cost_nanousd is None else 0,
        span.prompt_tokens,
        span.completion_tokens,
        span.cached_tokens,
        span.reasoning_tokens,
        span.cost_nanousd or 0,
    )


def record_request(trace: TraceRecord) -> Trace:
    """Write one request's trace, its spans and its spend in one transaction.

    Spend grows by one call per upstream call (a span with a provider); the
    upsert is a single statement, so no increment is lost between processes."""
    upstream = [s for s in trace.spans if s.is_upstream_call]
    costs = [s.cost_nanousd for s in upstream if s.cost_nanousd is not None]
    with transaction.atomic():
        row = Trace.objects.create(
            request_id=trace.request_id,
            started_at=trace.started_at,
            duration_ms=trace.duration_ms,
            overhead_ms=trace.overhead_ms,
            method=trace.method,
            path=trace.path[:100],
            key_name=trace.key_name,
            requested_model=trace.requested_model[:200],
            route=trace.route,
            formation_label=trace.formation_label[:64],
            session=trace.session[:128],
            stream=trace.stream,
            status=trace.status,
            http_status=trace.http_status,
            error_kind=trace.error_kind,
            error_message=trace.error_message[:500],
            prompt_tokens=sum(s.prompt_tokens for s in upstream),
            completion_tokens=sum(s.completion_tokens for s in upstream),
            cost_nanousd=sum(costs) if costs else None,
            body=trace.body,
        )
        if trace.spans:
            Span.objects.bulk_create(
                Span(
                    trace=row,
                    seq=s.seq,
                    parent_seq=s.parent_seq,
                    name=s.name,
                    provider=s.provider,
                    upstream_model=s.upstream_model[:200],
                    status=s.status,
                    http_status=s.http_status,
                    error_kind=s.error_kind,
                    started_at=s.started_at,
                    duration_ms=s.duration_ms,
                    ttft_ms=s.ttft_ms,
                    prompt_tokens=s.prompt_tokens,
                    completion_tokens=s.completion_tokens,
                    cached_tokens=s.cached_tokens,
                    reasoning_tokens=s.reasoning_tokens,
                    cost_nanousd=s.cost_nanousd,
                    cost_source=s.cost_source,
                    detail=s.detail,
                    body=s.body,
                )
                for s in trace.spans
            )
        if upstream:
            with connection.cursor() as cursor:
                cursor.executemany(_SPEND_UPSERT, [_spend_row(trace, s) for s in upstream])
        if upstream:
            # Counted once the transaction commits. On the writer thread,
            # where both this and spend_snapshot() run, the two never
            # interleave, so a snapshot counts each call exactly once
            # (elsewhere a call may be counted twice: too high, never too low).
            transaction.on_commit(lambda: _count_recorded(upstream))
    return row


# This process's recorded spend per UTC day, in nano-dollars: lets the spend
# cap add this process's own calls to a periodically read total
# (passthru/spendcap.py) instead of querying spend_daily before every call.
_recorded: defaultdict[date, int] = defaultdict(int)
_recorded_lock = threading.Lock()


def _count_recorded(spans: list[SpanRecord]) -> None:
    with _recorded_lock:
        for span in spans:
            _recorded[span.started_at.date()] += span.cost_nanousd or 0
        for day in [d for d in _recorded if len(_recorded) > 3 and d < max(_recorded)]:
            del _recorded[day]  # keep only the latest days


def recorded_nanousd(day: date) -> int:
    """What this process has recorded for `day` so far (committed calls only)."""
    return _recorded.get(day, 0)


def spend_snapshot(day: date) -> tuple[int, int]:
    """(spend_daily total for `day`, recorded_nanousd(day)) read together, so
    that the total already includes exactly the counted calls. Run it on the
    writer thread (`submit`)."""
    from ledger.selectors import spent_nanousd

    with _recorded_lock:
        return spent_nanousd(day), _recorded.get(day, 0)


# One writer thread per process, holding one persistent connection: Django's
# usual sync_to_async starts a thread and a connection per call, which
# performance-notes.md measured at twice the cost of the whole request.
_writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")


def _in_writer(fn, *args):  # type: ignore[no-untyped-def]
    close_old_connections()
    return fn(*args)


def submit(fn, *args) -> concurrent.futures.Future:  # type: ignore[no-untyped-def]
    """Run a sync ledger function on the writer thread; the caller may await it or not."""
    return _writer.submit(_in_writer, fn, *args)


async def arecord_request(trace: TraceRecord) -> None:
    """record_request from async code, awaited so the ledger is exact on return."""
    await asyncio.wrap_future(submit(record_request, trace))


def close_writer_connection() -> None:
    """Close the writer thread's connection (tests do, before dropping a database)."""
    # `connection` must be looked up on the writer thread: it is per-thread.
    submit(lambda: connection.close()).result()
