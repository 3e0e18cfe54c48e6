"""The pages that show what an arm did: the cost–reward frontier
(/reports/frontier/) and two trajectories side by side
(/reports/trajectories/). Thin views over ledger.reports.frontier and
ledger.reports.trajectories; the experiment page's live progress is
ledger.reports.live's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import mark_safe

from ledger.benchmarks.compare import TaskDiff
from ledger.models import BenchmarkRun
from ledger.reports import frontier as frontier_data
from ledger.reports import trajectories as trajectory_data
from ledger.reports.access import RUNS, SPEND, TRAJECTORIES, needs
from ledger.reports.forms import DATE, _choice_field, _choices
from ledger.reports.scatter import Dot, scatter_chart
from ledger.reports.selectors import run_choices


class FrontierForm(forms.Form):
    benchmark = forms.ChoiceField(required=False)
    domain = forms.ChoiceField(required=False)
    group = forms.ChoiceField(required=False)
    since = forms.DateField(required=False, widget=DATE, label="Imported from")
    until = forms.DateField(required=False, widget=DATE, label="to")
    k = forms.IntegerField(required=False, min_value=1, max_value=frontier_data.MAX_K, initial=1, label="pass^k, k =")
    by = forms.ChoiceField(required=False, choices=[("run", "each run"), ("group", "each group")], label="Points")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        known = run_choices()
        domains = sorted(BenchmarkRun.objects.order_by().values_list("domain", flat=True).distinct())
        _choice_field(self, "benchmark").choices = _choices(known.benchmarks, "the one with the most runs")
        _choice_field(self, "domain").choices = _choices([d for d in domains if d], "any domain")
        _choice_field(self, "group").choices = _choices(known.groups, "any group")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            raise forms.ValidationError("The range ends before it starts.")
        return data


def _short(p: frontier_data.FrontierPoint) -> str:
    """`#12` for a run, the arm for a group."""
    return f"#{p.run_ids[0]}" if p.key.startswith("run:") else p.arm


def _cost(value: float) -> str:
    return f"${value:.4g}"


@needs(RUNS, SPEND)
def frontier(request: HttpRequest) -> HttpResponse:
    form = FrontierForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        return render(request, "ledger/frontier.html", {"form": form}, status=400)
    data = form.cleaned_data if form.is_bound else {}
    try:
        result = frontier_data.frontier(
            benchmark=data.get("benchmark") or "", domain=data.get("domain") or "", group=data.get("group") or "",
            since=data.get("since"), until=data.get("until"), k=data.get("k") or 1, by=data.get("by") or "run",
        )  # fmt: skip
    except frontier_data.FrontierError as error:
        return render(request, "ledger/frontier.html", {"form": form, "error": str(error)}, status=400)
    dots = [
        Dot(p.key, p.label, None if p.cost_per_simulation_usd is None else float(p.cost_per_simulation_usd),
            p.value, p.lo, p.hi, p.on_frontier, short=_short(p))  # fmt: skip
        for p in result.points if p.value is not None and not p.apart  # the others are listed apart, not drawn
    ]
    chart = scatter_chart(
        dots, title=f"pass^{result.k} against cost per simulation, {result.benchmark}",
        x_title="cost per evaluated simulation (Marina's spend)", y_title=f"pass^{result.k}", x_format=_cost,
    )  # fmt: skip
    context = {
        "form": form,
        "result": result,
        "points": sorted(result.points, key=lambda p: (p.cost_per_simulation_nanousd is None, p.cost_per_simulation_nanousd or 0)),
        "chart_svg": mark_safe(chart) if dots else "",  # built from escaped text only (ledger.reports.scatter)
        "neighbours": _neighbour_rows(result),
    }
    return render(request, "ledger/frontier.html", context)


def _neighbour_rows(result: frontier_data.Frontier) -> list[dict[str, Any]]:
    """Each pair of neighbouring frontier points with their labels, for the page's table."""
    labels = {p.key: p.label for p in result.points}
    return [{"pair": n, "cheaper": labels[n.cheaper], "dearer": labels[n.dearer]} for n in frontier_data.neighbours(result)]


class TrajectoryQuery(forms.Form):
    a = forms.IntegerField(required=False, min_value=1)
    b = forms.IntegerField(required=False, min_value=1)
    group_a = forms.CharField(required=False, max_length=120)
    group_b = forms.CharField(required=False, max_length=120)
    task = forms.CharField(max_length=190)
    trial = forms.IntegerField(required=False, min_value=0)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for letter in ("a", "b"):
            if (data.get(letter) is None) == (not data.get(f"group_{letter}")):
                raise forms.ValidationError(f"Side {letter.upper()}: give a run ({letter}) or a group (group_{letter}), one of them.")
        return data


def trajectories_for(data: dict[str, Any]) -> trajectory_data.SideBySide:
    return trajectory_data.side_by_side(
        a=data.get("a"), b=data.get("b"), group_a=data.get("group_a") or "", group_b=data.get("group_b") or "",
        task=data["task"], trial=data.get("trial"),
    )  # fmt: skip


@needs(*TRAJECTORIES)
def trajectories(request: HttpRequest) -> HttpResponse:
    form = TrajectoryQuery(request.GET or None)
    if not form.is_valid():
        return render(request, "ledger/trajectories.html", {"form": form}, status=400 if form.is_bound else 200)
    try:
        view = trajectories_for(form.cleaned_data)
    except trajectory_data.TrajectoryError as error:
        return render(request, "ledger/trajectories.html", {"form": form, "error": str(error)}, status=404)
    rows = max(len(view.a.turns), len(view.b.turns))
    turns = [(view.a.turns[i] if i < len(view.a.turns) else None, view.b.turns[i] if i < len(view.b.turns) else None)
             for i in range(rows)]  # fmt: skip
    context = {"form": form, "view": view, "view_sides": [view.a, view.b], "turns": turns, "max_turns": trajectory_data.MAX_TURNS}
    return render(request, "ledger/trajectories.html", context)


@dataclass(frozen=True)
class DisagreementRow:
    """One row of the compare page's per-task table (ledger.benchmarks.compare.TaskDiff, formatted)."""

    task_id: str
    a: str  # "3/4": A's successes over its trials on the task
    b: str
    diff: str  # B − A pass rate, "+0.500"
    trajectories: str  # the trajectories page for this task and the same two sides; "" when not linked


def disagreement_rows(rows: list[TaskDiff], compared: dict[str, Any], *, linked: bool = True) -> list[DisagreementRow]:
    """The compare form's cleaned data -> the table's rows, their links naming the same two sides
    (the trajectories page needs traces too: no link the user cannot open). A plain template
    loop draws them: django-tables2 took ~45 ms a view for 100 tasks (docs/performance.md)."""
    if compared.get("mode") == "groups":
        pick = {"group_a": compared["group_a"], "group_b": compared["group_b"]}
    else:
        pick = {"a": compared["run_a"], "b": compared["run_b"]}
    page = reverse("reports:trajectories")
    return [
        DisagreementRow(
            task_id=t.task_id, a=f"{t.a_successes}/{t.a_trials}", b=f"{t.b_successes}/{t.b_trials}", diff=f"{t.diff:+.3f}",
            trajectories=page + "?" + urlencode({**pick, "task": t.task_id}) if linked else "",
        )
        for t in rows
    ]
