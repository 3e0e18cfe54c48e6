"""A real OTLP/HTTP trace receiver on loopback, for the export tests.

It answers `POST /v1/traces` the way a collector does and decodes each body
with OpenTelemetry's own protobuf messages (the opentelemetry-proto package),
so a span Marina got wrong on the wire fails to decode or shows up wrong here.

`hang()` makes it accept requests and never answer them (until `release()`):
a collector that is up but stuck, the worst case for an exporter."""
from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    trace_id: str  # hex, as OTLP/JSON and every trace viewer write it
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    kind: int  # OTLP's SpanKind: 1 internal, 2 server, 3 client
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any]
    scope: str


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ExportTraceServiceRequest, flattened."""
    request = ExportTraceServiceRequest.FromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={a.key: value_of(a.value) for a in span.attributes},
                        status_code=span.status.code,
                        status_message=span.status.message,
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )
    return found


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.raw: list[bytes] = []  # every decoded body, for the secrets check
        self.requests = 0  # export requests received, answered or not
        self.hanging = 0  # requests held unanswered right now
        self.lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(_Handler):
            owner = receiver

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release()
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    @property
    def base_url(self) -> str:
        """What OTEL_EXPORTER_OTLP_ENDPOINT is set to (the SDK adds /v1/traces)."""
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/v1/traces"

    def hang(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def with_attribute(self, key: str, value: Any) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.attributes.get(key) == value]

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
        wait_for(condition, f"{what} (received {len(self.spans)} spans so far)", timeout)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Exports arrive from the SDK's thread, a moment after the calls: wait on the condition."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class _Handler(BaseHTTPRequestHandler):
    owner: OtlpReceiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        encoding = (self.headers.get("content-encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        with self.owner.lock:
            self.owner.requests += 1
        if not self.owner._open.is_set():
            with self.owner.lock:
                self.owner.hanging += 1
            self.owner._open.wait()
            with self.owner.lock:
                self.owner.hanging -= 1
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.send_error(404 if self.path != "/v1/traces" else 415)
            return
        spans = decode(body)
        with self.owner.lock:
            self.owner.spans.extend(spans)
            self.owner.raw.append(body)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
