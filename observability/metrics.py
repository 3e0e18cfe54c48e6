"""Prometheus metrics: what every committed trace adds, the ledger writer's
health, and today's spend against the cap.

Under gunicorn every worker is its own process, so prometheus-client runs in
multiprocess mode: gunicorn.conf.py sets PROMETHEUS_MULTIPROC_DIR before any
worker starts, each worker writes its samples to files there, and a scrape of
any worker (`render`) adds up every worker's files. Without that variable
(a single process: runserver, tests) the default in-process registry is used.

Updates happen on the ledger writer thread after the callers have their
answer (`Observer.committed`): a handful of counter increments per request.

Labels are bounded: every distinct value is a series kept until the process
ends, and any client can send any model id or agent name (1,500 random ids
took /metrics from 9.6 KB to 6.3 MB). A model id (requested or upstream) is
a label once a provider has answered a call for it with anything but 404
(it exists), at most MAX_MODELS of them; key and agent names up to MAX_KEYS;
everything else is counted as `other`.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from kernel.money import to_usd
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.services import WriterObserver
from observability.spans import door

# Latency buckets in seconds. Upstream calls run from tens of milliseconds to
# minutes (reasoning models); Marina's own overhead is a few milliseconds.
UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
WRITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)

REQUESTS = Counter(
    "marina_requests",
    "Requests answered on /v1 (committed traces), by door, requested model, provider of the first upstream call, route, outcome and HTTP status.",
    ["door", "model", "provider", "route", "status", "code"],
)
REQUEST_SECONDS = Histogram(
    "marina_request_duration_seconds", "Whole request time as Marina saw it.", ["route"], buckets=UPSTREAM_BUCKETS
)
OVERHEAD_SECONDS = Histogram(
    "marina_overhead_seconds",
    "Marina's own time per request: the whole request less the time spent waiting on providers (x-marina-overhead-ms).",
    ["route"],
    buckets=OVERHEAD_BUCKETS,
)
UPSTREAM_CALLS = Counter(
    "marina_upstream_calls", "Calls to providers, by provider, upstream model and outcome.", ["provider", "model", "status"]
)
UPSTREAM_SECONDS = Histogram(
    "marina_upstream_duration_seconds", "Provider call latency.", ["provider", "model"], buckets=UPSTREAM_BUCKETS
)
UPSTREAM_TTFT_SECONDS = Histogram(
    "marina_upstream_ttft_seconds", "Time to the first streamed token.", ["provider", "model"], buckets=UPSTREAM_BUCKETS
)
TOKENS = Counter(
    "marina_tokens",
    "Tokens metered on upstream calls (kind: prompt, completion, cached, reasoning).",
    ["key", "model", "provider", "upstream_model", "kind"],
)
COST = Counter(
    "marina_cost_usd",
    "Cost of upstream calls in US dollars (the spend ledger's figure; unpriced calls add nothing).",
    ["key", "model", "provider", "upstream_model"],
)
UNPRICED = Counter(
    "marina_unpriced_calls", "Answered upstream calls with no known cost (failed calls are not counted here).", ["key", "model", "provider", "upstream_model"]
)
FORMATION_DECISIONS = Counter(
    "marina_formation_decisions", "Formation outcomes (x-marina-verify's value for verify).", ["formation", "decision"]
)
LEDGER_QUEUE = Gauge(
    "marina_ledger_queue_depth",
    "Traces waiting for the ledger writer, summed over live workers (as of each worker's last commit).",
    multiprocess_mode="livesum",
)
UPSTREAM_QUEUED = Gauge(
    "marina_upstream_queued_calls",
    "Calls waiting for a free connection to a provider (MARINA_UPSTREAM_MAX_CONNECTIONS reached), summed over live workers.",
    multiprocess_mode="livesum",
)
LEDGER_WRITE_SECONDS = Histogram(
    "marina_ledger_write_seconds", "Time of one group commit of traces, spans and spend.", buckets=WRITE_BUCKETS
)
LEDGER_WRITTEN = Counter("marina_ledger_traces_written", "Traces committed by the ledger writer.")
LEDGER_FAILED = Counter("marina_ledger_write_failures", "Traces the ledger writer could not commit.")

LEDGER_SPOOLED = Counter("marina_ledger_traces_spooled", "Traces written to the spool: the database did not answer.")
LEDGER_REPLAYED = Counter("marina_ledger_traces_replayed", "Traces written from the spool once the database answered again.")
LEDGER_SPOOL_HELD = Gauge(
    "marina_ledger_spool_held", "Traces waiting in the spool, summed over live workers.", multiprocess_mode="livesum"
)
LEDGER_SPOOL_FULL = Counter(
    "marina_ledger_spool_full", "Traces lost: the database did not answer and the spool was full (MARINA_SPOOL_MAX_BYTES or the disk)."
)
LEDGER_REFUSALS_COUNTED = Counter(
    "marina_ledger_refusals_counted",
    "Refused calls (no provider reached) counted, not traced: the database did not answer and the spool kept its room for calls admitted.",
)
USAGE_REJECTED = Counter(
    "marina_usage_rejected",
    "Upstream calls whose reported usage had a value no provider should send (negative, not finite, out of range): recorded as unknown.",
    ["provider", "field"],
)

TOKEN_KINDS = ("prompt", "completion", "cached", "reasoning")
OTHER = "other"
MAX_MODELS = 500
MAX_KEYS = 200
_models: set[str] = {""}  # ids a provider answered for (and "": refused before a model was read)
_keys: set[str] = set()


def _exists(span: SpanRecord) -> bool:
    """A provider answered for this call's model, and not with 404: the id exists."""
    return span.http_status is not None and span.http_status != 404


def _model(model: str, exists: bool) -> str:
    if model in _models:
        return model
    if exists and len(_models) < MAX_MODELS:
        _models.add(model)
        return model
    return OTHER


def _key(name: str) -> str:
    if name in _keys:
        return name
    if len(_keys) < MAX_KEYS:
        _keys.add(name)
        return name
    return OTHER


def _provider(trace: TraceRecord) -> str:
    return next((s.provider for s in trace.spans if s.is_upstream_call), "")


_children: dict[tuple[Any, ...], Any] = {}


def _labels(metric: Any, *values: str) -> Any:
    """`metric.labels(*values)`, kept. Each labels() call checks its values and
    takes the metric's lock: eight a request, a third of the ~50 µs the
    writer thread spent counting one, while the caller it had just woken
    waited for the GIL (docs/performance.md, issue 45). As many as the
    metric's own children: the values are bounded (the module's docstring)."""
    child = _children.get((metric, *values))
    if child is None:
        child = _children[(metric, *values)] = metric.labels(*values)
    return child


def _count_span(trace: TraceRecord, span: SpanRecord, model: str) -> None:
    upstream_model = _model(span.upstream_model, _exists(span))
    _labels(UPSTREAM_CALLS, span.provider, upstream_model, span.status).inc()
    _labels(UPSTREAM_SECONDS, span.provider, upstream_model).observe(span.duration_ms / 1000)
    if span.ttft_ms is not None:
        _labels(UPSTREAM_TTFT_SECONDS, span.provider, upstream_model).observe(span.ttft_ms / 1000)
    for field in (span.detail or {}).get("usage_rejected", ()):  # passthru/pricing.py's sanitising
        _labels(USAGE_REJECTED, span.provider, str(field)).inc()
    bucket = (_key(trace.key_name), model, span.provider, upstream_model)
    for kind, count in zip(
        TOKEN_KINDS, (span.prompt_tokens, span.completion_tokens, span.cached_tokens, span.reasoning_tokens)
    ):
        if count:
            _labels(TOKENS, *bucket, kind).inc(count)
    if span.cost_nanousd is not None:
        _labels(COST, *bucket).inc(span.cost_nanousd / 1e9)
    elif span.status != "error":  # answered and unpriced (a failed call is no price missing)
        _labels(UNPRICED, *bucket).inc()


def count_trace(trace: TraceRecord) -> None:
    """Add one committed request to the metrics."""
    route = trace.route or "none"
    model = _model(trace.requested_model, any(_exists(s) for s in trace.spans if s.is_upstream_call))
    _labels(REQUESTS, door(trace.path), model, _provider(trace), route, trace.status, str(trace.http_status)).inc()
    _labels(REQUEST_SECONDS, route).observe(trace.duration_ms / 1000)
    if trace.overhead_ms is not None:
        _labels(OVERHEAD_SECONDS, route).observe(trace.overhead_ms / 1000)
    if trace.formation_label:
        _labels(FORMATION_DECISIONS, trace.route, trace.formation_label).inc()
    for span in trace.spans:
        if span.is_upstream_call:
            _count_span(trace, span, model)


class Observer(WriterObserver):
    def committed(self, traces: Sequence[TraceRecord]) -> None:
        for trace in traces:
            count_trace(trace)
        LEDGER_WRITTEN.inc(len(traces))

    def batch_written(self, traces: int, seconds: float, failed: int, waiting: int) -> None:
        LEDGER_WRITE_SECONDS.observe(seconds)
        LEDGER_QUEUE.set(waiting)
        if failed:
            LEDGER_FAILED.inc(failed)

    def spooled(self, traces: int, held: int) -> None:
        LEDGER_SPOOLED.inc(traces)
        LEDGER_SPOOL_HELD.set(held)

    def replayed(self, traces: int, seconds: float, held: int) -> None:
        LEDGER_REPLAYED.inc(traces)
        LEDGER_SPOOL_HELD.set(held)

    def spool_full(self, traces: int) -> None:
        LEDGER_SPOOL_FULL.inc(traces)

    def refusals_counted(self, traces: int) -> None:
        LEDGER_REFUSALS_COUNTED.inc(traces)


OBSERVER = Observer()


class SpendCollector(Collector):
    """Today's spend (every worker and host sharing the ledger) and the cap,
    read from spend_daily when scraped."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from ledger.spend.selectors import spent_nanousd

        today = datetime.now(UTC).date()
        spent = GaugeMetricFamily("marina_spend_today_usd", "Spend recorded for the current UTC day, all keys.")
        spent.add_metric([], float(to_usd(spent_nanousd(today)) or 0))
        yield spent
        cap = settings.MARINA_DAILY_SPEND_CAP_USD
        if cap is not None:
            family = GaugeMetricFamily("marina_spend_cap_usd", "MARINA_DAILY_SPEND_CAP_USD (absent when the cap is off).")
            family.add_metric([], float(cap))
            yield family


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def render() -> bytes:
    """The exposition text of every worker's metrics, plus the spend gauges."""
    registry: CollectorRegistry
    if multiprocess():
        registry = CollectorRegistry(auto_describe=True)
        MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(_Default())
    registry.register(SpendCollector())
    return generate_latest(registry)


class _Default(Collector):
    """The in-process registry's metrics, re-collected into a scrape's registry."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()
