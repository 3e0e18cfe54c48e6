"""Demo data for a fresh machine (`manage.py demo`): τ² runs in two groups and
synthetic traffic from a built-in scripted provider, so the report pages and
the admin show something before a provider is wired up.

Everything it writes is marked, and `remove_demo` deletes exactly that:
- runs: group `demo:…` and source `demo/…` (files shipped in ledger/demo_data/,
  converted from the τ² fixtures with conversations and credentials removed);
- traffic: request ids `demo-…` from keys `demo-…`, served by the provider
  `demo` (which no configuration routes to, so /v1/models never lists it).

The traffic is written through the ledger's one writer
(ledger.spend.services.record_requests), so traces, spans and spend_daily agree
with each other exactly as they do for real calls."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.db import transaction
from django.db.models import QuerySet

from kernel import formations
from ledger import demo_arms
from ledger.benchmarks.importers import import_ledger
from ledger.benchmarks.options import ImportOptions
from ledger.models import BenchmarkRun, Span, SpendDaily, Trace
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.services import record_requests

DATA = Path(__file__).resolve().parent / "demo_data"
PROVIDER = "demo"
KEY_PREFIX = "demo-"
REQUEST_PREFIX = "demo-"
GROUP_PREFIX = "demo:"
SOURCE_PREFIX = "demo/"

BASE = "demo/alpha-large"
VERIFY = formations.VERIFY.wrap(BASE)
# ledger file stem -> (target, group, cost of the whole run in dollars)
RUNS = {
    "airline-1": (BASE, "demo:airline-plain", "0.84"),
    "airline-2": (BASE, "demo:airline-plain", "0.81"),
    "airline-3": (BASE, "demo:airline-plain", "0.86"),
    "airline-1-verify": (VERIFY, "demo:airline-verify", "2.31"),
    "airline-2-verify": (VERIFY, "demo:airline-verify", "2.27"),
    "airline-3-verify": (VERIFY, "demo:airline-verify", "2.40"),
    "retail-1": (BASE, "demo:retail-plain", "0.93"),
}


@dataclass(frozen=True)
class ScriptedModel:
    """One model of the scripted provider: prices and typical latency."""

    name: str
    usd_in: float  # per million prompt tokens
    usd_out: float  # per million completion tokens
    median_ms: float


MODELS = {
    m.name: m
    for m in (
        ScriptedModel("alpha-large", 2.5, 10.0, 1400.0),
        ScriptedModel("alpha-mini", 0.25, 2.0, 450.0),
        ScriptedModel("beta-chat", 1.0, 4.0, 800.0),
    )
}
# requested model id -> share of the traffic
TRAFFIC_MIX = {"demo/alpha-large": 0.35, "demo/alpha-mini": 0.30, "demo/beta-chat": 0.15, VERIFY: 0.20}
KEYS = {"demo-nightly-tau2": 0.6, "demo-ci": 0.25, "demo-alice": 0.15}
# verify's labels as the formation writes them, with a plausible share each
VERIFY_LABELS = {"approved": 0.72, "revised": 0.15, "held-write": 0.06, "flagged": 0.03, "checker-unavailable": 0.04}
ERROR_SHARE = 0.03
REQUESTS_PER_DAY = 1200


@dataclass
class DemoCounts:
    runs: int = 0
    items: int = 0
    traces: int = 0
    spans: int = 0
    spend_rows: int = 0
    linked_traces: int = 0  # of `traces`: the calls the runs' items are linked to


def load_demo(*, days: int = 1, seed: int = 0, now: datetime | None = None) -> DemoCounts:
    """Replace any demo data with fresh data: the shipped runs, and `days` of
    traffic ending at `now`. One transaction: all or nothing."""
    now = now or datetime.now(UTC)
    with transaction.atomic():
        remove_demo()
        counts = DemoCounts()
        runs = []
        for stem, (target, group, cost) in RUNS.items():
            options = ImportOptions(
                target=target, group=group, label="demo data (manage.py demo --remove deletes it)", cost_usd=Decimal(cost)
            )
            result = import_ledger(DATA / f"{stem}.ledger.json", options)
            counts.runs += 1
            counts.items += result.items
            runs.append(result.run)
        # More arms, each item linked to its calls, and a running experiment (ledger/demo_arms.py).
        for run in demo_arms.add_derived_runs(DATA, "demo data (manage.py demo --remove deletes it)"):
            counts.runs += 1
            counts.items += run.simulations
            runs.append(run)
        counts.linked_traces = demo_arms.link_demo_items(runs, seed=seed, now=now)
        demo_arms.live_experiment(now=now)
        traces = list(synthetic_traffic(days=days, seed=seed, now=now))
        for start in range(0, len(traces), 200):
            # No observer hears of them: synthetic traffic must never reach an OTLP backend
            # (demo --remove cannot take it back there) nor the metrics.
            record_requests(traces[start : start + 200], notify=False)
        counts.traces = _demo_traces().count()  # the day's traffic, the items' calls, the live experiment's
        counts.spans = Span.objects.filter(trace__in=_demo_traces()).count()
        counts.spend_rows = _demo_spend().count()
    return counts


def remove_demo() -> DemoCounts:
    """Delete every row the demo wrote, and nothing else."""
    with transaction.atomic():
        runs = _demo_runs()
        counts = DemoCounts(runs=runs.count())
        counts.items = sum(r.simulations for r in runs)
        traces = _demo_traces()
        counts.traces = traces.count()
        # Spans go with their traces (ON DELETE CASCADE, done by Django).
        deleted, by_model = traces.delete()
        counts.spans = by_model.get("ledger.Span", 0)
        counts.spend_rows, _ = _demo_spend().delete()
        runs.delete()
        demo_arms.demo_experiments().delete()
    return counts


def demo_present() -> bool:
    """Whether demo rows are in the ledger (the pages say so)."""
    return _demo_runs().exists() or _demo_spend().exists() or demo_arms.demo_experiments().exists()


def _demo_runs() -> QuerySet[BenchmarkRun]:
    return BenchmarkRun.objects.filter(group__startswith=GROUP_PREFIX, source_name__startswith=SOURCE_PREFIX)


def _demo_traces() -> QuerySet[Trace]:
    return Trace.objects.filter(request_id__startswith=REQUEST_PREFIX, key_name__startswith=KEY_PREFIX)


def _demo_spend() -> QuerySet[SpendDaily]:
    return SpendDaily.objects.filter(provider=PROVIDER, key_name__startswith=KEY_PREFIX)


# --- The scripted provider and its traffic ---------------------------------------


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _busyness(hour: float) -> float:
    """Relative request rate over a UTC day: a working-day hump and a nightly τ² batch."""
    day = math.exp(-(((hour - 14) / 4.5) ** 2))
    night = 0.8 * math.exp(-(((hour - 2) / 1.2) ** 2))
    return 0.15 + day + night


def synthetic_traffic(*, days: int, seed: int, now: datetime) -> list[TraceRecord]:
    """`days` × ~REQUESTS_PER_DAY requests ending at `now`, oldest first, deterministic for a seed."""
    rng = random.Random(seed)
    start = now - timedelta(days=days)
    minutes = days * 24 * 60
    weights = []
    for m in range(minutes):
        moment = start + timedelta(minutes=m)
        weights.append(_busyness(moment.hour + moment.minute / 60))
    scale = REQUESTS_PER_DAY * days / sum(weights)
    traces: list[TraceRecord] = []
    for minute, weight in enumerate(weights):
        expected = weight * scale
        count = int(expected) + (1 if rng.random() < expected - int(expected) else 0)
        for _ in range(count):
            at = start + timedelta(minutes=minute, seconds=rng.uniform(0, 59.9))
            if at < now:
                traces.append(_request(rng, at, len(traces)))
    return traces


def _call(rng: random.Random, seq: int, parent: int | None, name: str, model: str, at: datetime, failing: bool) -> SpanRecord:
    """One call to the scripted provider: its reply's usage, cost and timing."""
    spec = MODELS[model]
    duration = spec.median_ms * math.exp(rng.gauss(0, 0.45))
    span = SpanRecord(
        seq=seq, parent_seq=parent, name=name, started_at=at, duration_ms=round(duration, 2),
        provider=PROVIDER, upstream_model=model, http_status=200,
    )  # fmt: skip
    if failing:
        status = rng.choice([429, 500, 502, 503])
        span.status, span.http_status, span.error_kind = "error", status, f"http_{status}"
        span.duration_ms = round(duration / 5, 2)
        return span
    span.ttft_ms = round(duration * rng.uniform(0.15, 0.4), 2)
    span.prompt_tokens = int(rng.uniform(800, 7000))
    span.cached_tokens = int(span.prompt_tokens * rng.choice([0, 0, 0.5, 0.8]))
    span.completion_tokens = int(rng.uniform(40, 700))
    cost = (span.prompt_tokens * spec.usd_in + span.completion_tokens * spec.usd_out) / 1e6
    span.cost_nanousd = round(cost * 1e9)
    span.cost_source = "provider"
    return span


def _request(rng: random.Random, at: datetime, n: int) -> TraceRecord:
    requested = _pick(rng, TRAFFIC_MIX)
    failing = rng.random() < ERROR_SHARE
    overhead = round(0.9 + rng.expovariate(1 / 0.8), 3)
    trace = TraceRecord(
        request_id=f"{REQUEST_PREFIX}{n:06d}-{rng.getrandbits(32):08x}",
        started_at=at,
        path="/v1/chat/completions",
        key_name=_pick(rng, KEYS),
        requested_model=requested,
        session=f"demo-sim-{rng.randrange(10)}-{rng.randrange(4)}",
        overhead_ms=overhead,
    )
    if requested == VERIFY:
        trace.route = "verify"
        _verify(rng, trace, at, failing)
    else:
        trace.route = "passthru"
        trace.stream = rng.random() < 0.3
        span = _call(rng, 0, None, "upstream", requested.partition("/")[2], at, failing)
        trace.spans = [span]
        if failing:
            trace.status, trace.http_status, trace.error_kind = "error", span.http_status or 502, span.error_kind
        trace.duration_ms = round(span.duration_ms + overhead, 2)
    return trace


def _verify(rng: random.Random, trace: TraceRecord, at: datetime, failing: bool) -> None:
    """draft -> review -> (revision), children of one `verify` span, as the formation records them."""
    label = "draft-failed" if failing else _pick(rng, VERIFY_LABELS)
    root = SpanRecord(seq=0, name="verify", started_at=at)
    root.detail = {"proposer": "demo/alpha-large", "checker": "demo/alpha-mini", "max_rounds": 1, "label": label}
    spans = [root]
    clock = at
    draft = _call(rng, 1, 0, "draft", "alpha-large", clock, failing)
    spans.append(draft)
    if not failing:
        clock += timedelta(milliseconds=draft.duration_ms)
        review = _call(rng, 2, 0, "review", "alpha-mini", clock, label == "checker-unavailable")
        verdict = {"approved": "approve", "checker-unavailable": "unavailable"}.get(label, "revise")
        review.detail = {"verdict": verdict}
        if label in ("revised", "held-write"):
            review.detail["fix"] = "Confirm the cabin class before changing the booking."
        spans.append(review)
        root.detail["verdict"] = verdict
        if label in ("revised", "held-write"):
            clock += timedelta(milliseconds=review.duration_ms)
            revision = _call(rng, 3, 0, "revision", "alpha-large", clock, False)
            guard = "accepted" if label == "revised" else "held"
            revision.detail = {"guard": guard, "writes_changed": label == "held-write"}
            root.detail["guard"] = guard
            spans.append(revision)
    else:
        trace.status, trace.http_status, trace.error_kind = "error", draft.http_status or 502, draft.error_kind
    root.duration_ms = round(sum(s.duration_ms for s in spans[1:]), 2)
    root.status = "error" if failing else "ok"
    trace.formation_label = label
    trace.spans = spans
    trace.duration_ms = round(root.duration_ms + (trace.overhead_ms or 0), 2)
