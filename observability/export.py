"""Stored traces written out for offline tools (`manage.py export_traces`).

Two encodings of the same spans (observability/spans.py, so ids and attributes
match the live export):

- `otlp-json`: OTLP's JSON encoding, one ExportTraceServiceRequest per line
  (one Marina trace each), the layout of the OpenTelemetry file exporter: each
  line can be posted as is to a collector's /v1/traces
  (Content-Type: application/json) or read by its otlpjsonfile receiver.
- `jsonl`: one span per line, flat (`trace_id`, `span_id`, `parent_span_id`,
  `name`, `kind`, times, `status`, `attributes`), for jq, DuckDB or pandas.

Streaming: traces are read in chunks of CHUNK with their spans and benchmark
links prefetched per chunk (`.iterator(chunk_size=...)`), and each line is
written as soon as it is made, so memory stays flat for millions of spans.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db.models import Prefetch

from ledger.models import BenchmarkItemTrace, Span, Trace
from ledger.spend.records import SpanRecord, TraceRecord
from observability import spans as otel_spans
from observability.spans import ItemLink, OtelSpan

FORMATS = ("otlp-json", "jsonl")
CHUNK = 500
_KIND_NAMES = {otel_spans.INTERNAL: "internal", otel_spans.SERVER: "server", otel_spans.CLIENT: "client"}
_STATUS_ERROR = 2  # OTLP's STATUS_CODE_ERROR
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Writer(Protocol):
    """A text file, or a command's stdout."""

    def write(self, text: str, /) -> object: ...


@dataclass
class Exported:
    traces: int = 0
    spans: int = 0


def stored_traces(since: datetime, until: datetime | None = None) -> Iterator[tuple[TraceRecord, list[ItemLink]]]:
    """Traces started in [since, until), oldest first, as records with their item links."""
    found = Trace.objects.filter(started_at__gte=since)
    if until is not None:
        found = found.filter(started_at__lt=until)
    found = found.order_by("started_at", "id").prefetch_related(
        Prefetch("spans", queryset=Span.objects.order_by("seq")),
        Prefetch("item_links", queryset=BenchmarkItemTrace.objects.select_related("item").order_by("id")),
    )
    for trace in found.iterator(chunk_size=CHUNK):
        links = [ItemLink(run_id=link.item.run_id, item_id=link.item.item_id, role=link.role) for link in trace.item_links.all()]
        yield _record(trace), links


def _record(trace: Trace) -> TraceRecord:
    return TraceRecord(
        request_id=trace.request_id,
        started_at=trace.started_at,
        path=trace.path,
        method=trace.method,
        duration_ms=trace.duration_ms,
        overhead_ms=trace.overhead_ms,
        key_name=trace.key_name,
        requested_model=trace.requested_model,
        route=trace.route,
        formation_label=trace.formation_label,
        session=trace.session,
        stream=trace.stream,
        status=trace.status,
        http_status=trace.http_status,
        error_kind=trace.error_kind,
        error_message=trace.error_message,
        body=trace.body,
        conv_seed=trace.conv_seed,
        conv_opening=trace.conv_opening,
        conv_system=trace.conv_system,
        spans=[
            SpanRecord(
                seq=s.seq,
                name=s.name,
                started_at=s.started_at,
                duration_ms=s.duration_ms,
                parent_seq=s.parent_seq,
                provider=s.provider,
                upstream_model=s.upstream_model,
                status=s.status,
                http_status=s.http_status,
                error_kind=s.error_kind,
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
            for s in trace.spans.all()
        ],
    )


def export_traces(out: Writer, *, since: datetime, until: datetime | None = None, fmt: str = "otlp-json") -> Exported:
    """Write the traces started in [since, until) to `out`, one line at a time."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    bodies = settings.MARINA_TRACE_BODIES
    head = _otlp_head() if fmt == "otlp-json" else ""
    done = Exported()
    for trace, links in stored_traces(since, until):
        made = otel_spans.to_spans(trace, bodies=bodies, links=links)
        if fmt == "otlp-json":
            out.write(head + ",".join(_dumps(_otlp_span(s)) for s in made) + "]}]}]}\n")
        else:
            for span in made:
                out.write(_dumps(_flat_span(span)) + "\n")
        done.traces += 1
        done.spans += len(made)
    return done


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- otlp-json -------------------------------------------------------------------


def _otlp_head() -> str:
    """Everything of a line before its spans: the resource and the scope."""
    attributes = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "marina"}
    resource = {"attributes": [_otlp_attribute(k, v) for k, v in attributes.items()]}
    return '{"resourceSpans":[{"resource":' + _dumps(resource) + ',"scopeSpans":[{"scope":{"name":"marina"},"spans":['


def _otlp_span(span: OtelSpan) -> dict[str, Any]:
    # OTLP/JSON: ids in hex (not protobuf's base64), 64-bit integers as strings, enums as numbers.
    out: dict[str, Any] = {
        "traceId": f"{span.trace_id:032x}",
        "spanId": f"{span.span_id:016x}",
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": [_otlp_attribute(k, v) for k, v in span.attributes.items()],
        "status": {} if span.error is None else {"code": _STATUS_ERROR, "message": span.error},
    }
    if span.parent_id is not None:
        out["parentSpanId"] = f"{span.parent_id:016x}"
    return out


def _otlp_attribute(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": _otlp_value(value)}


def _otlp_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_otlp_value(v) for v in value]}}
    return {"stringValue": str(value)}


# --- jsonl -------------------------------------------------------------------------


def _iso(ns: int) -> str:
    return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat()


def _flat_span(span: OtelSpan) -> dict[str, Any]:
    return {
        "trace_id": f"{span.trace_id:032x}",
        "span_id": f"{span.span_id:016x}",
        "parent_span_id": None if span.parent_id is None else f"{span.parent_id:016x}",
        "name": span.name,
        "kind": _KIND_NAMES[span.kind],
        "start_time": _iso(span.start_ns),
        "end_time": _iso(span.end_ns),
        "duration_ms": (span.end_ns - span.start_ns) / 1e6,
        "status": "ok" if span.error is None else "error",
        "status_message": span.error,
        "attributes": dict(span.attributes),
    }
