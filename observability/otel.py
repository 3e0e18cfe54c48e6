"""OpenTelemetry export of every committed trace: OTLP over HTTP/protobuf,
through the SDK's BatchSpanProcessor.

Imported only when an OTLP endpoint is configured (settings.MARINA_OTEL_EXPORT,
checked by observability/apps.py); otherwise nothing of OpenTelemetry is
loaded. The endpoint, headers, timeout, compression and batching come from the
SDK's own variables (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT,
OTEL_BSP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).

Off the request path twice over: `Exporter.committed` runs on the ledger
writer thread after the callers have their answer, and only builds the spans
and queues them (a deque append each); the processor's own thread encodes and
sends them. A slow or dead collector fills that queue, and past its size the
SDK drops the oldest spans with a warning: calls and ledger rows never wait for it.

Marina's spans were recorded earlier, with their own times and ids derived
from the request id (observability/spans.py), so they are handed to the
processor as finished `ReadableSpan`s: the SDK's tracer can only start spans
now, with random ids.
"""
from __future__ import annotations

import atexit
import os
from collections.abc import Sequence

from django.conf import settings
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ledger.spend.records import TraceRecord
from ledger.spend.services import WriterObserver
from observability import spans

SERVICE_NAME = "marina"
SCOPE = InstrumentationScope("marina")
_KINDS = {spans.INTERNAL: SpanKind.INTERNAL, spans.SERVER: SpanKind.SERVER, spans.CLIENT: SpanKind.CLIENT}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)  # the batch processor passes on sampled spans only


def resource() -> Resource:
    """service.name `marina` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name another."""
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return Resource.create({} if named else {"service.name": SERVICE_NAME})


def readable(span: spans.OtelSpan, resource: Resource) -> ReadableSpan:
    context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=_SAMPLED)
    parent = (
        None
        if span.parent_id is None
        else SpanContext(span.trace_id, span.parent_id, is_remote=False, trace_flags=_SAMPLED)
    )
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=span.attributes,
        kind=_KINDS[span.kind],
        status=Status(StatusCode.UNSET) if span.error is None else Status(StatusCode.ERROR, span.error),
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=SCOPE,
    )


class Exporter(WriterObserver):
    """Hands every committed trace's spans to a span processor."""

    def __init__(self, processor: SpanProcessor, resource: Resource) -> None:
        self.processor = processor
        self.resource = resource

    def committed(self, traces: Sequence[TraceRecord]) -> None:
        bodies = settings.MARINA_TRACE_BODIES
        for trace in traces:
            for span in spans.to_spans(trace, bodies=bodies):
                self.processor.on_end(readable(span, self.resource))

    def shutdown(self) -> None:
        """Send what is queued (bounded by the exporter's timeout) and stop."""
        self.processor.shutdown()


def start() -> Exporter:
    """The exporter for this process: OTLP/HTTP to the configured endpoint,
    flushed when the process exits."""
    exporter = Exporter(BatchSpanProcessor(OTLPSpanExporter()), resource())
    atexit.register(exporter.shutdown)
    return exporter
