"""Reads behind the report pages and the admin: everything the pages show is computed here;
tables and templates only lay it out. Spend reads live in ledger.spend.selectors."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.db.models import Count, FloatField, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from ledger.benchmarks.decisions import summary as decisions_summary
from ledger.benchmarks.metrics import Summary, summarize
from ledger.benchmarks.stats import pass_hat_k_intervals
from ledger.models import BenchmarkItem, BenchmarkRun, Span, SpendDaily, Trace
from ledger.spend.selectors import owns

# --- Reads behind the report pages and the admin ---------------------------------
# Everything the pages show is computed here; tables and templates only lay it out.



@dataclass
class RunChoices:
    groups: list[str]
    benchmarks: list[str]
    targets: list[str]


def run_choices() -> RunChoices:
    """The distinct values the runs filter offers."""

    def distinct(field: str) -> list[str]:
        # order_by(): with the model's ordering (created_at) DISTINCT would keep one row per run.
        values = BenchmarkRun.objects.exclude(**{field: ""}).order_by().values_list(field, flat=True).distinct()
        return sorted(values)

    return RunChoices(groups=distinct("group"), benchmarks=distinct("benchmark"), targets=distinct("target"))


def runs(
    *,
    group: str = "",
    benchmark: str = "",
    target: str = "",
    since: date | None = None,
    until: date | None = None,
) -> QuerySet[BenchmarkRun]:
    """Runs matching the filter (created between two UTC days, inclusive),
    annotated with `pass1` so pass^1 sorts in the database."""
    qs = BenchmarkRun.objects.annotate(pass1=Cast(KT("pass_hat_k__0"), FloatField()))
    wanted = {
        "group": group,
        "benchmark": benchmark,
        "target": target,
        "created_at__date__gte": since,
        "created_at__date__lte": until,
    }
    return qs.filter(**_given(wanted)).order_by("-created_at", "-pk")


@dataclass(frozen=True)
class CurvePoint:
    k: int
    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Cell:
    """One (task, trial) outcome in the run grid."""

    trial: int
    reward: float | None
    correct: bool
    infra_error: bool
    termination_reason: str
    item_pk: int = 0
    link_status: str = ""  # linked | unfound | ambiguous | "" (see ledger/benchmarks/links.py)
    trace_calls: int = 0
    trace_cost_nanousd: int | None = None
    decided: str = ""  # what formations decided on its calls, for people (ledger.benchmarks.decisions.summary)

    @property
    def outcome(self) -> str:
        return "infra" if self.infra_error else ("pass" if self.correct else "fail")


@dataclass
class RunReport:
    run: BenchmarkRun
    summary: Summary  # recomputed from the items; must agree with the run's stored figures
    curve: list[CurvePoint]
    grid: list[dict[str, Any]]  # one row per task: task_id, task_key, successes, evaluated, pass_rate, t0..tN
    trials: list[int]
    terminations: list[dict[str, Any]]  # reason, count, infra
    confidence: float

    @property
    def stored_matches_items(self) -> bool:
        stored = self.run.pass_hat_k or []
        return len(stored) == len(self.summary.pass_hat_k) and all(
            abs(a - b) < 1e-6 for a, b in zip(stored, self.summary.pass_hat_k)
        )


def task_key(task_id: str) -> tuple[int, int | str]:
    """Natural order for task ids: τ² ids are mostly integers kept as strings."""
    return (0, int(task_id)) if task_id.isdigit() else (1, task_id)


def run_report(run: BenchmarkRun, *, resamples: int = 1000, seed: int = 0) -> RunReport:
    """Everything the run page shows: figures recomputed from its items (with
    infrastructure errors excluded, as metrics.summarize does), the pass^k
    curve with task-bootstrap intervals, the task × trial grid and the
    termination reasons."""
    items = list(run.items.order_by("task_id", "trial"))
    summary = summarize(items)
    by_task: dict[str, list[BenchmarkItem]] = defaultdict(list)
    for item in items:
        by_task[item.task_id].append(item)
    evaluated = [[i.correct for i in rows if not i.infra_error] for rows in by_task.values()]
    confidence = 0.95
    intervals = pass_hat_k_intervals(
        [t for t in evaluated if t], max_k=summary.max_k, resamples=resamples, seed=seed, confidence=confidence
    )
    curve = [
        CurvePoint(k=k, value=v, lo=lo, hi=hi)
        for k, (v, (lo, hi)) in enumerate(zip(summary.pass_hat_k, intervals), start=1)
    ]
    trials = sorted({i.trial for i in items})
    grid = []
    for task_id, rows in by_task.items():
        done = [i for i in rows if not i.infra_error]
        successes = sum(i.correct for i in done)
        row: dict[str, Any] = {
            "task_id": task_id,
            "task_key": task_key(task_id),
            "successes": successes,
            "evaluated": len(done),
            "infra_errors": len(rows) - len(done),
            "pass_rate": successes / len(done) if done else None,
        }
        for i in rows:
            row[f"t{i.trial}"] = Cell(
                trial=i.trial,
                reward=i.reward,
                correct=i.correct,
                infra_error=i.infra_error,
                termination_reason=i.termination_reason,
                item_pk=i.pk,
                link_status=i.link_status,
                trace_calls=i.trace_calls,
                trace_cost_nanousd=i.trace_cost_nanousd,
                decided=decisions_summary(i.decisions, i.formation_counters) if i.decisions else "",
            )
        grid.append(row)
    grid.sort(key=lambda r: r["task_key"])
    reasons = (
        run.items.values("termination_reason")
        .annotate(count=Count("pk"), infra=Count("pk", filter=Q(infra_error=True)))
        .order_by("-count", "termination_reason")
    )
    terminations = [
        {"reason": r["termination_reason"] or "(none)", "count": r["count"], "infra": r["infra"]} for r in reasons
    ]
    return RunReport(
        run=run,
        summary=summary,
        curve=curve,
        grid=grid,
        trials=trials,
        terminations=terminations,
        confidence=confidence,
    )


# --- Traces ------------------------------------------------------------------------


def traces(
    *,
    model: str = "",
    key: str = "",
    status: str = "",
    formation_label: str = "",
    session: str = "",
    item: int | None = None,
) -> QuerySet[Trace]:
    """Traces matching the filter, newest first; `item`: the traces linked to that benchmark item."""
    wanted = {
        "requested_model": model,
        "key_name": key,
        "status": status,
        "formation_label": formation_label,
        "session": session,
    }
    found = Trace.objects.filter(**_given(wanted))
    if item:
        found = found.filter(item_links__item_id=item)
    return found.order_by("-started_at", "-pk")


def trace_suggestions() -> dict[str, list[str]]:
    """Model and key names for the traces filter, read from spend_daily: a small
    table, where a DISTINCT over every trace would scan millions of rows."""
    return {
        "models": sorted(SpendDaily.objects.values_list("requested_model", flat=True).distinct()),
        "keys": sorted(k for k in SpendDaily.objects.values_list("key_name", flat=True).distinct() if k),
    }


@dataclass(frozen=True)
class SpanNode:
    span: Span
    depth: int
    offset_ms: float  # start relative to the trace's start
    bar_left: float  # waterfall bar position, percent of the trace's duration
    bar_width: float


def trace_for(request_id: str, owner: str | None = None) -> Trace | None:
    """The trace of a request id (the first, if a client reused the id), or
    only among `owner`'s (ledger.spend.selectors.owns) when given: another
    key's trace is as unknown as a missing one. The same one query either way:
    the owner is checked on the rows it returns (a request id is one row but
    for a client that reuses it), not by a condition the ORM must compile for
    each read (bench/scoped_reads.py measured that at +30 % on the query)."""
    rows = Trace.objects.filter(request_id=request_id).order_by("pk")
    if owner is None:
        return rows.first()
    return next((t for t in rows if owns(owner, t.key_name)), None)


def span_tree(trace: Trace) -> list[SpanNode]:
    """The trace's spans in tree order (each parent before its children, by
    seq), with their start offsets for the waterfall."""
    # trace_started_at names the one day partition the spans are in (PostgreSQL), where
    # trace_id alone would probe every day's index.
    spans = list(Span.objects.filter(trace=trace, trace_started_at=trace.started_at).order_by("seq"))
    children: dict[int | None, list[Span]] = defaultdict(list)
    known = {s.seq for s in spans}
    for s in spans:
        # A parent that was never recorded would hide its subtree: show it at the root.
        children[s.parent_seq if s.parent_seq in known else None].append(s)
    total = max(trace.duration_ms, max((_offset(trace, s) + s.duration_ms for s in spans), default=0.0), 1e-9)
    out: list[SpanNode] = []
    seen: set[int] = set()

    def walk(group: list[Span], depth: int) -> None:
        for s in group:
            if s.seq in seen:
                continue
            seen.add(s.seq)
            offset = _offset(trace, s)
            out.append(
                SpanNode(
                    span=s,
                    depth=depth,
                    offset_ms=offset,
                    bar_left=100 * max(offset, 0.0) / total,
                    bar_width=max(100 * s.duration_ms / total, 0.5),
                )
            )
            walk(children.get(s.seq, []), depth + 1)

    walk(children.get(None, []), 0)
    # Spans in a parent cycle are unreachable from the root: still show them.
    walk([s for s in spans if s.seq not in seen], 0)
    return out


def _offset(trace: Trace, span: Span) -> float:
    return (span.started_at - trace.started_at).total_seconds() * 1000


# --- Comparisons ---------------------------------------------------------------------


def run_labels(limit: int = 500) -> list[tuple[int, str]]:
    """(id, label) of the newest runs, for the compare page's pickers."""
    rows = BenchmarkRun.objects.order_by("-created_at", "-pk").values_list(
        "pk", "benchmark", "target", "group", "label"
    )[:limit]
    return [(pk, f"#{pk} {bench} · {target}" + (f" · {group}" if group else "") + (f" · {label}" if label else ""))
            for pk, bench, target, group, label in rows]  # fmt: skip


@dataclass
class ComparisonView:
    """What the compare page draws from a ledger.benchmarks.compare.Comparison."""

    max_k: int
    curve_a: list[CurvePoint]
    curve_b: list[CurvePoint]
    rows: list[dict[str, Any]]  # figure, a, b, diff (B - A), kind (rate or usd)
    disagreements: list[Any]  # TaskDiff rows whose pass rates differ, largest first


def _shared_outcomes(comparison: Any) -> tuple[dict[str, list[bool]], dict[str, list[bool]]]:
    """Per task, the outcomes each side was compared on: the item ids every
    run of both sides evaluated (ledger.benchmarks.compare's rule), pooled over a side's runs."""
    run_ids = [*comparison.a.run_ids, *comparison.b.run_ids]
    evaluated: dict[int, dict[str, tuple[str, bool]]] = defaultdict(dict)
    rows = BenchmarkItem.objects.filter(run_id__in=run_ids, infra_error=False)
    for run_id, item_id, task_id, correct in rows.values_list("run_id", "item_id", "task_id", "correct"):
        evaluated[run_id][item_id] = (task_id, correct)
    shared = set.intersection(*(set(evaluated[r]) for r in run_ids)) if run_ids else set()

    def pooled(ids: list[int]) -> dict[str, list[bool]]:
        per_task: dict[str, list[bool]] = defaultdict(list)
        for run_id in ids:
            for item_id in shared:
                task_id, correct = evaluated[run_id][item_id]
                per_task[task_id].append(correct)
        return per_task

    return pooled(comparison.a.run_ids), pooled(comparison.b.run_ids)


def _side_curve(side: Any, per_task: dict[str, list[bool]], *, resamples: int, seed: int) -> list[CurvePoint]:
    """The side's pass^k (as ledger.benchmarks.compare computed it) with task-bootstrap
    intervals over the same outcomes."""
    values = list(side.pass_hat_k)
    intervals = pass_hat_k_intervals(list(per_task.values()), max_k=len(values), resamples=resamples, seed=seed)
    return [CurvePoint(k=k, value=v, lo=lo, hi=hi) for k, (v, (lo, hi)) in enumerate(zip(values, intervals), start=1)]


def _points(value: float, places: int) -> str:
    """A pass-rate difference in percentage points, signed with a true minus: +10.0, −3."""
    text = f"{abs(value) * 100:.{places}f}"
    if float(text) == 0:
        return text
    return ("−" if value < 0 else "+") + text


def compare_verdict(comparison: Any) -> tuple[str, str]:
    """The compare page's one line: "B − A = +10.0 pts, 95 % CI [−3, +23], McNemar p = 0.22:
    not significant (no difference larger than 25.0 points …)", and its kind (a, b or none: which side is better, if the interval says so).
    The bootstrap interval decides (docs/comparisons.md: McNemar p is a rough guide)."""
    lo, hi = comparison.diff_ci
    p = comparison.mcnemar_p
    p_text = "< 0.0001" if p < 1e-4 else f"{p:.2g}" if p < 0.01 else f"{p:.2f}"
    head = (
        f"B − A = {_points(comparison.diff_pass1, 1)} pts pass^1, 95 % CI [{_points(lo, 0)}, {_points(hi, 0)}], "
        f"McNemar p = {p_text}"
    )
    if lo > 0:
        return f"{head}: B is better (the interval is above 0)", "b"
    if hi < 0:
        return f"{head}: A is better (the interval is below 0)", "a"
    # What the runs could have detected (ledger.benchmarks.power's verdict), when compare said it.
    said = getattr(comparison, "verdict", "")
    return f"{head}: not significant ({said or 'the interval includes 0'})", "none"


def comparison_view(comparison: Any, *, resamples: int = 1000, seed: int = 0) -> ComparisonView:
    """Curves, figure rows and disagreeing tasks of a ledger.benchmarks.compare.Comparison."""
    a, b = comparison.a, comparison.b
    tasks_a, tasks_b = _shared_outcomes(comparison)
    curve_a = _side_curve(a, tasks_a, resamples=resamples, seed=seed)
    curve_b = _side_curve(b, tasks_b, resamples=resamples, seed=seed)
    rows: list[dict[str, Any]] = [
        {"figure": "mean reward", "a": a.mean_reward, "b": b.mean_reward, "kind": "rate"},
    ]
    for k in range(1, max(len(a.pass_hat_k), len(b.pass_hat_k)) + 1):
        rows.append({
            "figure": f"pass^{k}",
            "a": a.pass_hat_k[k - 1] if k <= len(a.pass_hat_k) else None,
            "b": b.pass_hat_k[k - 1] if k <= len(b.pass_hat_k) else None,
            "kind": "rate",
        })  # fmt: skip
    rows.append({"figure": "$ per evaluated item (whole runs)", "a": a.cost_per_item_usd, "b": b.cost_per_item_usd, "kind": "usd"})
    for row in rows:
        row["diff"] = row["b"] - row["a"] if row["a"] is not None and row["b"] is not None else None
    disagreements = sorted(
        (t for t in comparison.tasks if abs(t.diff) > 1e-12), key=lambda t: (-abs(t.diff), task_key(t.task_id))
    )
    return ComparisonView(
        max_k=max(len(curve_a), len(curve_b)),
        curve_a=curve_a,
        curve_b=curve_b,
        rows=rows,
        disagreements=disagreements,
    )


def _given(filters: Mapping[str, object]) -> dict[str, object]:
    """The filters a form actually set (empty fields filter nothing)."""
    return {lookup: value for lookup, value in filters.items() if value}
