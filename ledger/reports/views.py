"""The report pages under /reports/: thin views that read through
ledger.reports.selectors, lay figures out with ledger.reports.tables and draw with
ledger.reports.charts. Every page needs a logged-in user (the admin's login)
with the admin's rights to what it shows (`needs`): a staff account with the
models' view permissions, so a page never shows what the admin would refuse."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.safestring import mark_safe
from django_tables2 import RequestConfig
from django_tables2.paginators import LazyPaginator

from kernel import money
from kernel.redact import redact
from ledger.benchmarks import callers, experiments, stopping
from ledger.benchmarks.compare import CompareError, compare_groups, compare_runs
from ledger.benchmarks.cost_sources import cost_source_label
from ledger.demo import demo_present
from ledger.models import BenchmarkItem, BenchmarkRun, Experiment, Trace
from ledger.reports import live, overview, selectors, spendcsv
from ledger.reports.access import EXPERIMENTS, RUNS, SPEND, TRACES, TRAJECTORIES, may_see, needs
from ledger.reports.charts import Point, Series, Stack, line_chart, stacked_bar_chart
from ledger.reports.forms import CompareForm, RunFilterForm, SpendRangeForm, TraceFilterForm
from ledger.reports.insight_views import disagreement_rows
from ledger.reports.tables import (
    OutcomeColumn,
    RunTable,
    SpendTable,
    TaskGridTable,
    TerminationTable,
    TraceTable,
)
from ledger.spend import selectors as spend_selectors

# Stacks beyond this many models are summed into "other" in the spend chart.
CHART_MODELS = 7

def _rate(value: float) -> str:
    return f"{value:.2f}"


def _dollars(value: float) -> str:
    return f"${value:.4g}"


def _model_stacks(cost: dict[str, list[int]], models: list[str], limit: int) -> list[Stack]:
    """Chart stacks in dollars (floats) for the `limit` most expensive models, the rest summed as "other"."""
    shown, rest = models[:limit], models[limit:]
    stacks = [Stack(m, [float(money.to_usd(v) or 0) for v in cost[m]]) for m in shown]
    if rest:
        other = [sum(v) for v in zip(*(cost[m] for m in rest))]
        stacks.append(Stack(f"{len(rest)} other models", [float(money.to_usd(v) or 0) for v in other]))
    return stacks


@needs(RUNS, SPEND, TRACES)
def index(request: HttpRequest) -> HttpResponse:
    """The overview: traffic, spend against the cap, latency, formation
    decisions and the latest runs, each linking to its detail page."""
    today = spend_selectors.utc_today()
    traffic = overview.traffic(today)
    week = spend_selectors.spend_by_model(since=today - timedelta(days=6), until=today)
    cap = traffic.cap_nanousd
    spend_chart = stacked_bar_chart(
        [d.strftime("%m-%d") for d in week.days],
        _model_stacks(week.cost, week.models, 5),
        title="Spend per UTC day, last 7 days, by requested model",
        y_format=_dollars,
        width=640,
        height=280,
        reference=("daily cap", float(money.to_usd(cap) or 0)) if cap else None,
    )
    hours = overview.requests_per_hour()
    hourly_chart = stacked_bar_chart(
        [h.hour.strftime("%H:00") for h in hours],
        [Stack("ok", [float(h.ok) for h in hours], colour="#009E73"), Stack("error", [float(h.errors) for h in hours], colour="#D55E00")],
        title="Requests per UTC hour, last 24 hours",
        width=640,
        height=280,
        max_labels=8,
    )
    runs = overview.latest_runs(10)
    # One chart per benchmark: an airline pass^1 beside a retail one compares nothing.
    runs_charts = []
    for benchmark in dict.fromkeys(r.benchmark for r in runs):
        charted = [r for r in reversed(runs) if r.pass_hat_k and r.benchmark == benchmark]
        if charted:
            chart = stacked_bar_chart(
                [f"#{r.pk}" for r in charted],
                [Stack("pass^1", [r.pass_hat_k[0] for r in charted], colour="#0072B2")],
                title=f"pass^1 of the latest {benchmark} runs",
                y_format=_rate,
                width=460,
                height=240,
            )
            runs_charts.append(mark_safe(chart))  # built from escaped text only (ledger.reports.charts)
    decisions = overview.formation_decisions()
    for row in decisions.rows:
        row["share"] = row["count"] / decisions.total
    context = {
        "today": today,
        "traffic": traffic,
        "cap_usd": money.to_usd(cap) if cap else None,
        "latency": [overview.latency(timedelta(hours=1), "last hour"), overview.latency(timedelta(days=1), "last 24 hours")],
        "decisions": decisions,
        "runs": runs,
        "latest": RunTable(runs, orderable=False),
        "demo": demo_present(),
        # Built from escaped text only (ledger.reports.charts).
        "spend_svg": mark_safe(spend_chart),
        "hourly_svg": mark_safe(hourly_chart),
        "runs_svgs": runs_charts,
        "any_requests": any(h.ok or h.errors for h in hours),
    }
    return render(request, "ledger/index.html", context)


@needs(RUNS)
def run_list(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        return render(request, "ledger/run_list.html", {"form": form}, status=400)
    filters = form.cleaned_data if form.is_bound else {}
    table = RunTable(selectors.runs(**{k: v for k, v in filters.items() if v}))
    RequestConfig(request, paginate={"per_page": 25}).configure(table)
    return render(request, "ledger/run_list.html", {"form": form, "table": table})


@needs(RUNS)
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(BenchmarkRun, pk=pk)
    report = selectors.run_report(run)
    grid = TaskGridTable(
        report.grid,
        extra_columns=[
            (f"t{n}", OutcomeColumn(verbose_name=f"trial {n}", orderable=False, linked=may_see(request.user, (TRACES,))))
            for n in report.trials
        ],
    )
    RequestConfig(request, paginate=False).configure(grid)
    curve = line_chart(
        [f"k={p.k}" for p in report.curve],
        [Series(f"#{run.pk} {run.target}", [Point(p.value, p.lo, p.hi) for p in report.curve])],
        title=f"pass^k of run #{run.pk}",
        y_max=1.0,
        y_format=_rate,
    )
    context: dict[str, Any] = {
        "run": run,
        "report": report,
        "grid": grid,
        "terminations": TerminationTable(report.terminations),
        "curve_svg": mark_safe(curve),  # built from escaped text only (ledger.reports.charts)
        "cost_source": cost_source_label(run.cost_source),
        "experiment_runs": run.experiment_runs.select_related("experiment"),
        "callers": [c for c in callers.by_caller(run) if c.calls],  # the agent's, the user's, τ²'s own calls
        # Import strips credentials; redact again so a page never shows one.
        "agent_args": redact(run.agent_args),
        "user_args": redact(run.user_args),
    }
    return render(request, "ledger/run_detail.html", context)


@needs(SPEND)
def spend(request: HttpRequest) -> HttpResponse:
    form = SpendRangeForm.from_query(request.GET)
    if not form.is_valid():
        return render(request, "ledger/spend.html", {"form": form}, status=400)
    since, until = form.range()
    data = spend_selectors.spend_by_model(since=since, until=until)
    # The chart draws dollars (floats); the table and totals keep exact nano-dollars.
    stacks = _model_stacks(data.cost, data.models, CHART_MODELS)
    chart = stacked_bar_chart(
        [d.strftime("%m-%d") for d in data.days],
        stacks,
        title=f"Spend per day by model, {since} to {until}",
        y_format=_dollars,
        width=1180,
    )
    table = SpendTable(data.rows)
    RequestConfig(request, paginate={"per_page": 50}).configure(table)
    context = {
        "form": form,
        "data": data,
        "table": table,
        "chart_svg": mark_safe(chart),  # built from escaped text only (ledger.reports.charts)
        "csv_query": form.query_string(),
    }
    return render(request, "ledger/spend.html", context)


@needs(SPEND)
def spend_csv(request: HttpRequest) -> HttpResponse:
    """The spend_daily rows of the range, one line per bucket, cost in exact dollars."""
    form = SpendRangeForm.from_query(request.GET)
    if not form.is_valid():
        return HttpResponse(_error_lines(form), content_type="text/plain; charset=utf-8", status=400)
    since, until = form.range()
    response = HttpResponse(spendcsv.spend_csv(since, until), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="marina-spend-{since}-{until}.csv"'
    return response


def _error_lines(form: forms.Form) -> str:
    """The form's errors as text, one per line, each with its field's label."""
    lines = [f"{form.fields[name].label or name}: {e}" if name != "__all__" else str(e)
             for name, errors in form.errors.items() for e in errors]  # fmt: skip
    return "\n".join(lines) + "\n"


@needs(TRACES)
def trace_list(request: HttpRequest) -> HttpResponse:
    form = TraceFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        context = {"form": form, "known": selectors.trace_suggestions()}
        return render(request, "ledger/trace_list.html", context, status=400)
    filters = form.cleaned_data if form.is_bound else {}
    table = TraceTable(selectors.traces(**{k: v for k, v in filters.items() if v}))
    # LazyPaginator: no COUNT(*) over a table that grows by one row per request.
    RequestConfig(request, paginate={"per_page": 50, "paginator_class": LazyPaginator}).configure(table)
    # A grid cell's link (?item=) filters by a benchmark item the form does not show: say which.
    item = BenchmarkItem.objects.select_related("run").filter(pk=filters["item"]).first() if filters.get("item") else None
    context = {"form": form, "table": table, "known": selectors.trace_suggestions(), "item": item}
    return render(request, "ledger/trace_list.html", context)


@needs(TRACES)
def trace_detail(request: HttpRequest, pk: int) -> HttpResponse:
    trace = get_object_or_404(Trace, pk=pk)
    nodes = selectors.span_tree(trace)
    context = {
        "trace": trace,
        "nodes": nodes,
        "item_links": trace.item_links.select_related("item"),
        # Bodies are stored redacted (MARINA_TRACE_BODIES=on); redact again on the way out.
        "body": redact(trace.body) if trace.body is not None else None,
        # MARINA_TRACE_STORE=otel: the calls' spans are in the collector's backend, not here.
        "spans_in_collector": settings.MARINA_TRACE_STORE == "otel",
    }
    return render(request, "ledger/trace_detail.html", context)


def _side_names(data: dict[str, Any]) -> tuple[str, str]:
    """What tells A from B: a run's id, target and group (two runs may share a label,
    such as the demo's note), a group's name."""
    if data["mode"] != "runs":
        return f"group {data['group_a']}", f"group {data['group_b']}"
    runs = {r.pk: r for r in BenchmarkRun.objects.filter(pk__in=[data["run_a"], data["run_b"]])}

    def name(pk: int) -> str:
        run = runs[int(pk)]
        return f"run #{run.pk} · {run.target}" + (f" · {run.group}" if run.group else "")

    return name(data["run_a"]), name(data["run_b"])


@needs(RUNS)
def compare(request: HttpRequest) -> HttpResponse:
    """Two runs or two groups side by side, picked with a GET form."""
    form = CompareForm(
        request.GET or None, runs=selectors.run_labels(), groups=selectors.run_choices().groups
    )
    context: dict[str, Any] = {"form": form}
    if form.is_valid():
        data = form.cleaned_data
        try:
            if data["mode"] == "runs":
                comparison = compare_runs(data["run_a"], data["run_b"])
            else:
                comparison = compare_groups(data["group_a"], data["group_b"])
        except CompareError as error:  # 400, as GET /api/compare answers it
            context["error"] = str(error)
            return render(request, "ledger/compare.html", context, status=400)
        view = selectors.comparison_view(comparison)
        names = _side_names(data)
        linked = may_see(request.user, TRAJECTORIES)
        chart = line_chart(
            [f"k={k}" for k in range(1, view.max_k + 1)],
            [
                Series(f"{tag}: {name}", [Point(p.value, p.lo, p.hi) for p in curve])
                for tag, name, curve in (("A", names[0], view.curve_a), ("B", names[1], view.curve_b))
            ],
            title="pass^k of both sides",
            y_max=1.0,
            y_format=_rate,
        )
        context |= {
            "headline": selectors.compare_verdict(comparison),
            "side_names": names,
            "comparison": comparison,
            "view": view,
            "chart_svg": mark_safe(chart),  # built from escaped text only (ledger.reports.charts)
            # Each task linked to its trajectories, for whom may open them.
            "disagreements": disagreement_rows(view.disagreements, data, linked=linked),
            "linked": linked,
        }
    elif form.is_bound:  # a pick the page cannot use (unknown run or group, one side, the same twice): 400, as the filters
        return render(request, "ledger/compare.html", context, status=400)
    return render(request, "ledger/compare.html", context)


@needs(EXPERIMENTS)
def experiment_list(request: HttpRequest) -> HttpResponse:
    """The experiments `manage.py repro_tau2` ran, newest first."""
    return render(request, "ledger/experiment_list.html", {"experiments": experiments.recent(200)})


@needs(EXPERIMENTS)
def experiment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One experiment as one unit: its arms side by side (the baseline first), every run of each,
    and each arm against the baseline on this experiment's runs."""
    experiment = get_object_or_404(Experiment, pk=pk)
    table = experiments.arm_table(experiment)
    context = {
        "experiment": experiment,
        "arms": table,
        "replicates": sorted({r.replicate for row in table for r in row.runs}),
        "comparisons": experiments.arm_comparisons(experiment),
        # per arm: progress, spend, pass^1 so far, errors, ETA; and the one spend figure with its basis
        "live": live.experiment_progress(experiment),
        "power": stopping.plan_progress(experiment),  # the --detect plan and how far it has come (issue 46)
        "stopping": stopping.state(experiment),  # each arm's anytime interval and whether it decides
    }
    return render(request, "ledger/experiment_detail.html", context)

