"""What the OpenTelemetry export costs per trace, against the ledger write it
follows, measured in the same run.

    .venv/bin/python bench/otel_export.py                 # ~20 s
    .venv/bin/python bench/otel_export.py --traces 5000

In one process, on a temporary SQLite ledger, for a plain call (root + one
upstream span) and a verify formation (root + verify + three calls):

- ledger: `record_requests([trace])`, one transaction per trace (the writer
  thread's work for a trace when there is no group to share it with);
- metrics: the Prometheus observer's `count_trace` (writer thread);
- otel, writer thread: `Exporter.committed([trace])`, building the spans and
  queueing them on a BatchSpanProcessor (the part that delays the next ledger
  write);
- otel, exporter thread: OTLPSpanExporter encoding the spans and posting them
  to a loopback receiver that answers 200, in batches of 512: the CPU (thread
  time) the worker process spends on it beside its requests, off the writer
  thread.

Reports microseconds per trace (wall time, median of 5 rounds; the exporter's
CPU time) and each otel figure as a ratio of the ledger write."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 5


def _setup_django(folder: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DATABASE_URL"] = f"sqlite:///{folder}/bench.sqlite3"
    os.environ["MARINA_ENV_FILE"] = os.devnull
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--no-input", verbosity=0)


def _trace(i: int, kind: str) -> Any:
    from ledger.spend.records import SpanRecord, TraceRecord

    now = datetime.now(UTC)

    def call(seq: int, name: str, parent: int | None) -> SpanRecord:
        return SpanRecord(
            seq=seq, name=name, parent_seq=parent, started_at=now + timedelta(milliseconds=seq), duration_ms=850.0,
            provider="openrouter", upstream_model="openai/gpt-4.1-mini", http_status=200, prompt_tokens=4800,
            completion_tokens=48, cost_nanousd=1_234_567, cost_source="provider",
        )

    if kind == "plain":
        spans = [call(0, "upstream", None)]
        model, route, label = "openrouter/openai/gpt-4.1-mini", "passthru", ""
    else:
        verify = SpanRecord(seq=0, name="verify", started_at=now, duration_ms=2600.0, detail={"label": "revised", "verdict": "revise", "rounds": 1})
        spans = [verify, call(1, "draft", 0), call(2, "review", 0), call(3, "revision", 0)]
        model, route, label = "marina/verify:openrouter/openai/gpt-4.1-mini", "verify", "revised"
    return TraceRecord(
        request_id=f"req-{kind}-{i}", started_at=now, path="/v1/chat/completions", duration_ms=2700.0, overhead_ms=1.0,
        key_name="bench", requested_model=model, route=route, formation_label=label, status="ok", http_status=200,
        spans=spans, conv_seed=300, conv_opening="0123456789abcdef",
    )


def _per_trace(fn: Callable[[Any], object], traces: list[Any]) -> float:
    """Median over ROUNDS of the mean seconds per trace."""
    rounds = []
    per_round = len(traces) // ROUNDS
    for r in range(ROUNDS):
        chunk = traces[r * per_round : (r + 1) * per_round]
        started = time.perf_counter()
        for trace in chunk:
            fn(trace)
        rounds.append((time.perf_counter() - started) / len(chunk))
    return statistics.median(rounds)


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=2000, help="traces per kind (default 2000)")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="marina-otel-bench-")
    _setup_django(folder)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from ledger.spend import services
    from observability import metrics, otel, spans

    class Discard(SpanExporter):
        def export(self, batch: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    resource = otel.resource()
    queued = otel.Exporter(BatchSpanProcessor(Discard(), max_queue_size=10**6, max_export_batch_size=512), resource)
    wire = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{sink.server_address[1]}/v1/traces")
    services.remove_observer(metrics.OBSERVER)  # timed on its own below

    print(f"{'trace':8} {'ledger µs':>10} {'metrics µs':>11} {'otel writer µs':>15} {'otel exporter CPU µs':>21}  writer/ledger  exporter/ledger")
    for kind in ("plain", "verify"):
        traces = [_trace(i, kind) for i in range(args.traces)]
        ledger = _per_trace(lambda t: services.record_requests([t], notify=False), traces)
        counted = _per_trace(metrics.count_trace, traces)
        writer = _per_trace(lambda t: queued.committed([t]), traces)
        readable: list[ReadableSpan] = [otel.readable(s, resource) for t in traces for s in spans.to_spans(t)]
        per_trace = len(readable) / len(traces)
        started = time.thread_time()  # this thread's CPU: the receiver's threads are not counted
        for at in range(0, len(readable), 512):
            assert wire.export(readable[at : at + 512]) == SpanExportResult.SUCCESS
        exporter = (time.thread_time() - started) / len(readable) * per_trace
        print(
            f"{kind:8} {ledger * 1e6:10.0f} {counted * 1e6:11.1f} {writer * 1e6:15.1f} {exporter * 1e6:21.1f}"
            f"  {writer / ledger:13.3f}  {exporter / ledger:15.3f}"
        )
    queued.shutdown()
    wire.shutdown()
    sink.shutdown()


if __name__ == "__main__":
    main()
