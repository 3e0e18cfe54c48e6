"""Reads behind the overview page (/reports/): the figures a team lead looks at
each morning. Every read is bounded, so the page stays fast on a ledger of
millions of traces (bench/reports_scale.py):
- calls, errors and spend come from spend_daily (one row per day, key and model);
- latency percentiles come from at most LATENCY_SAMPLE of the newest requests
  (and their upstream calls) in the window, found through the started_at index;
- formation decisions and requests per hour scan only the window's traces,
  through the (route, started_at) and started_at indexes."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncHour

from kernel.money import to_nanousd
from ledger.benchmarks.stats import percentile
from ledger.models import BenchmarkRun, Span, SpendDaily, Trace
from ledger.reports.selectors import runs
from ledger.spend.selectors import utc_today

# Percentiles are computed over at most this many of the window's newest requests.
LATENCY_SAMPLE = 10_000
TOP = 5


@dataclass(frozen=True)
class DayTotals:
    calls: int
    errors: int
    unpriced_calls: int
    cost_nanousd: int

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.calls if self.calls else None


@dataclass(frozen=True)
class SpendDay:
    day: date
    cost_nanousd: int
    calls: int
    errors: int


@dataclass(frozen=True)
class Ranked:
    name: str
    calls: int
    cost_nanousd: int


@dataclass
class Traffic:
    """Calls, errors and spend from spend_daily: today, yesterday and the last 7 days."""

    today: DayTotals
    yesterday: DayTotals
    week: DayTotals
    days: list[SpendDay]  # the last 7 UTC days, oldest first, zeros included
    cap_nanousd: int | None  # MARINA_DAILY_SPEND_CAP_USD, None when off
    top_models: list[Ranked]  # last 7 days, by spend
    top_keys: list[Ranked]
    models_today: list[dict[str, Any]]  # requested_model, calls, errors, unpriced_calls, cost_nanousd
    models_yesterday: list[dict[str, Any]]

    @property
    def cap_used(self) -> float | None:
        """Today's share of the daily cap."""
        if not self.cap_nanousd:
            return None
        return self.today.cost_nanousd / self.cap_nanousd

    @property
    def empty(self) -> bool:
        return not any(d.calls for d in self.days)


_SUMS = {"calls": Sum("calls"), "errors": Sum("errors"), "unpriced_calls": Sum("unpriced_calls"), "cost_nanousd": Sum("cost_nanousd")}


def _totals(row: dict[str, Any]) -> DayTotals:
    return DayTotals(*(row.get(name) or 0 for name in ("calls", "errors", "unpriced_calls", "cost_nanousd")))


def traffic(today: date | None = None) -> Traffic:
    today = today or utc_today()
    since = today - timedelta(days=6)
    yesterday = today - timedelta(days=1)
    week = SpendDaily.objects.filter(day__gte=since, day__lte=today)
    per_day: dict[date, dict[str, Any]] = {r["day"]: dict(r) for r in week.values("day").annotate(**_SUMS).order_by("day")}
    days = [since + timedelta(days=n) for n in range(7)]
    zero: dict[str, Any] = {"calls": 0, "errors": 0, "unpriced_calls": 0, "cost_nanousd": 0}
    week_rows = [per_day.get(d, zero) for d in days]

    def ranked(field_name: str) -> list[Ranked]:
        rows = week.values(field_name).annotate(**_SUMS).order_by("-cost_nanousd", "-calls", field_name)[:TOP]
        return [Ranked(r[field_name] or "(none)", r["calls"] or 0, r["cost_nanousd"] or 0) for r in rows]

    def models_on(day: date) -> list[dict[str, Any]]:
        rows = week.filter(day=day).values("requested_model").annotate(**_SUMS)
        return [dict(r) for r in rows.order_by("-cost_nanousd", "requested_model")]

    cap = settings.MARINA_DAILY_SPEND_CAP_USD
    return Traffic(
        today=_totals(per_day.get(today, zero)),
        yesterday=_totals(per_day.get(yesterday, zero)),
        week=DayTotals(*(sum(r[name] or 0 for r in week_rows) for name in zero)),
        days=[SpendDay(d, r["cost_nanousd"] or 0, r["calls"] or 0, r["errors"] or 0) for d, r in zip(days, week_rows)],
        cap_nanousd=None if cap is None else to_nanousd(Decimal(cap)),
        top_models=ranked("requested_model"),
        top_keys=ranked("key_name"),
        models_today=models_on(today),
        models_yesterday=models_on(yesterday),
    )


@dataclass(frozen=True)
class Percentiles:
    count: int  # requests (or calls) the figures are over
    sampled: bool  # True when the window held more than LATENCY_SAMPLE
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class Latency:
    window: str  # "last hour", "last day"
    overhead: Percentiles  # Marina's own time per request
    upstream: Percentiles  # each upstream call's duration


def _percentiles(values: list[float], sampled: bool) -> Percentiles:
    values.sort()
    if not values:
        return Percentiles(0, sampled, None, None)
    return Percentiles(len(values), sampled, percentile(values, 0.5), percentile(values, 0.99))


def latency(window: timedelta, name: str, now: datetime | None = None) -> Latency:
    """The window's requests (at most the newest LATENCY_SAMPLE) and their upstream calls.
    `overhead.count` is every request of the window (a request with no overhead recorded
    still counts), its percentiles over those that have one."""
    now = now or datetime.now(UTC)
    recent = Trace.objects.filter(started_at__gte=now - window, started_at__lte=now).order_by("-started_at")
    rows = list(recent.values_list("overhead_ms", "started_at")[:LATENCY_SAMPLE])
    sampled = len(rows) == LATENCY_SAMPLE
    overhead = [ms for ms, _ in rows if ms is not None]
    upstream: list[float] = []
    if rows:
        # The sample's own calls, its trace ids chosen again in the same statement (ids need
        # not follow time: an import or a slow request writes out of order; sending 10,000
        # ids back as parameters cost the page more than its queries). The trace's time,
        # copied on each span, keeps PostgreSQL to the window's partitions (ledger/spend/partitions.py).
        oldest = min(started for _, started in rows)
        calls = Span.objects.filter(
            trace_id__in=recent.values("pk")[:LATENCY_SAMPLE], trace_started_at__gte=oldest, trace_started_at__lte=now
        ).exclude(provider="")
        # No ordering: Span's default (by trace, i.e. the trace's time) joins and sorts.
        upstream = list(calls.order_by().values_list("duration_ms", flat=True))
    overheads = _percentiles(overhead, sampled)
    return Latency(name, Percentiles(len(rows), sampled, overheads.p50, overheads.p99), _percentiles(upstream, sampled))


@dataclass
class Decisions:
    """Formation labels over a window, per formation (route)."""

    since: datetime
    rows: list[dict[str, Any]] = field(default_factory=list)  # route, formation_label, count

    @property
    def total(self) -> int:
        return sum(int(r["count"]) for r in self.rows)


def formation_decisions(window: timedelta = timedelta(days=7), now: datetime | None = None) -> Decisions:
    now = now or datetime.now(UTC)
    since = now - window
    rows = (
        Trace.objects.filter(started_at__gte=since)
        .exclude(route__in=("", "passthru"))
        .values("route", "formation_label")
        .annotate(count=Count("pk"))
        .order_by("route", "-count", "formation_label")
    )
    return Decisions(since=since, rows=[dict(r) for r in rows])


@dataclass(frozen=True)
class HourBucket:
    hour: datetime
    ok: int
    errors: int


def requests_per_hour(now: datetime | None = None, hours: int = 24) -> list[HourBucket]:
    """Requests per UTC hour over the last `hours`, every hour present."""
    now = now or datetime.now(UTC)
    first = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours - 1)
    rows = (
        Trace.objects.filter(started_at__gte=first)
        .annotate(hour=TruncHour("started_at"))
        .values("hour")
        .annotate(total=Count("pk"), errors=Count("pk", filter=Q(status="error")))
        .order_by()
    )
    counted = {r["hour"]: r for r in rows}
    buckets = []
    for n in range(hours):
        hour = first + timedelta(hours=n)
        row = counted.get(hour, {"total": 0, "errors": 0})
        buckets.append(HourBucket(hour, row["total"] - row["errors"], row["errors"]))
    return buckets


def latest_runs(limit: int = 10) -> list[BenchmarkRun]:
    """The newest runs (annotated with pass1, as the runs page's), for the pass^1 chart and table."""
    return list(runs()[:limit])
