"""Ledger rows for the report tests: traces (and their spend) through the real
writer, ledger.spend.services.record_request. Runs come from the real importer
(tests/ledger/conftest.py) or tests.ledger.builders.make_run."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledger.models import Trace
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.services import record_request


def record_trace(
    *,
    request_id: str,
    model: str,
    key: str = "tester",
    started_at: datetime | None = None,
    status: str = "ok",
    formation_label: str = "",
    session: str = "",
    calls: list[tuple[str, int | None]] | None = None,
    path: str = "/v1/chat/completions",
    conv_seed: int | None = None,
) -> Trace:
    """One request through the real ledger writer (trace, spans and spend).
    `calls` lists (upstream model, cost in nano-dollars) per upstream call; more
    than one call becomes a verify-style formation: draft, review, revision."""
    start = started_at or datetime.now(UTC)
    calls = calls or [(model, 1_250_000)]
    spans: list[SpanRecord] = []
    if len(calls) == 1:
        upstream, cost = calls[0]
        spans.append(_call(1, None, "upstream", upstream, cost, start, status))
    else:
        spans.append(
            SpanRecord(seq=1, name="formation", started_at=start, duration_ms=900.0, detail={"verdict": "revised"})
        )
        names = ["draft", "review", "revision"]
        for n, (upstream, cost) in enumerate(calls):
            span = _call(n + 2, 1, names[n % 3], upstream, cost, start + timedelta(milliseconds=300 * n), status)
            if names[n % 3] == "review":
                span.detail = {"verdict": "revise", "note": "cite the baggage rule", "held_write": False}
            spans.append(span)
    return record_request(
        TraceRecord(
            request_id=request_id,
            started_at=start,
            path=path,
            conv_seed=conv_seed,
            duration_ms=300.0 * len(calls) + 20,
            overhead_ms=4.5,
            key_name=key,
            requested_model=model,
            route="passthru" if len(calls) == 1 else "verify",
            formation_label=formation_label,
            session=session,
            status=status,
            http_status=200 if status == "ok" else 502,
            error_kind="" if status == "ok" else "upstream_error",
            spans=spans,
        )
    )


def _call(seq: int, parent: int | None, name: str, upstream: str, cost: int | None, start: datetime, status: str) -> SpanRecord:
    provider, _, upstream_model = upstream.partition("/")
    return SpanRecord(
        seq=seq,
        parent_seq=parent,
        name=name,
        provider=provider,
        upstream_model=upstream_model,
        started_at=start,
        duration_ms=280.0,
        status=status,
        http_status=200 if status == "ok" else 502,
        ttft_ms=120.0,
        prompt_tokens=1000,
        completion_tokens=200,
        cost_nanousd=cost,
        cost_source="provider" if cost is not None else "none",
    )
