"""Declarative django-tables2 tables for the report pages. Formatting only:
every figure arrives computed (ledger.reports.selectors)."""
from __future__ import annotations

from typing import Any

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html
from django_tables2.utils import A

from kernel import money
from ledger.benchmarks.cost_sources import cost_source_label
from ledger.models import BenchmarkRun, Trace
from ledger.templatetags.ledger_format import breakable, cost_of, duration, money_html

ATTRS = {"class": "report"}


class UsdColumn(tables.Column):
    """Integer nano-dollars as a person reads them, the exact figure on hover (`money_html`)."""

    attrs = {"td": {"class": "num"}, "th": {"class": "num"}}

    def render(self, value: int) -> str:
        return money_html(value)


class RateColumn(tables.Column):
    """A 0..1 figure with three decimals."""

    attrs = {"td": {"class": "num"}, "th": {"class": "num"}}

    def render(self, value: float) -> str:
        return f"{value:.3f}"


class NumberColumn(tables.Column):
    attrs = {"td": {"class": "num"}, "th": {"class": "num"}}

    def render(self, value: float) -> str:
        return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


class OutcomeColumn(tables.Column):
    """One (task, trial) cell of the run grid: pass, fail or infrastructure error."""

    attrs = {"td": {"class": "outcome"}, "th": {"class": "outcome"}}
    _marks = {"pass": "✓", "fail": "✗", "infra": "!"}

    def __init__(self, *args: Any, linked: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.linked = linked  # a cell links to its traces only for whom may open them

    def render(self, value: Any) -> str:
        reward = "—" if value.reward is None else f"{value.reward:g}"
        cell = format_html(
            '<span class="cell cell-{}" title="trial {}: reward {} · {}">{}</span>',
            value.outcome,
            value.trial,
            reward,
            value.termination_reason or "no termination reason",
            self._marks[value.outcome],
        )
        if value.trace_calls and self.linked:
            # The cell opens the traces Marina linked to this item on import.
            url = reverse("reports:traces") + f"?item={value.item_pk}"
            cost = money.dollars(value.trace_cost_nanousd, unknown="unpriced")
            decided = f"; {value.decided}" if value.decided else ""
            return format_html(
                '<a href="{}" title="{} linked call(s), {}{}">{}</a>', url, value.trace_calls, cost, decided, cell
            )
        if value.link_status in ("unfound", "ambiguous"):
            return format_html('{}<sup class="unlinked" title="no trace linked: {}">?</sup>', cell, value.link_status)
        return cell


class RunTable(tables.Table):
    id = tables.Column(verbose_name="Run", linkify=("reports:run", {"pk": A("pk")}))
    group = tables.Column()
    benchmark = tables.Column()
    target = tables.Column()
    simulations = NumberColumn(verbose_name="Sims")
    infra_errors = NumberColumn(verbose_name="Infra")
    mean_reward = RateColumn(verbose_name="Reward")
    pass1 = RateColumn(verbose_name="pass^1")
    pass_hat_k = tables.Column(verbose_name="pass^k", orderable=False, attrs=RateColumn.attrs)
    cost_nanousd = UsdColumn(verbose_name="Cost", empty_values=())  # an unpriced run says so
    comparable = tables.BooleanColumn(verbose_name="Comparable", yesno="yes,no")
    created_at = tables.DateTimeColumn(verbose_name="Imported", format="Y-m-d H:i", attrs={"td": {"class": "nowrap"}})

    class Meta:
        model = BenchmarkRun
        fields = ()
        attrs = ATTRS
        per_page = 25
        empty_text = "No runs match. Import one with manage.py import_tau2."

    def render_id(self, value: int, record: BenchmarkRun) -> str:
        if record.is_invalid:
            return format_html('#{} <span class="badge invalid" title="{}">invalid</span>', value, record.invalid_reason)
        return f"#{value}"

    def render_target(self, value: str, record: BenchmarkRun) -> str:
        if record.target_kind == BenchmarkRun.TargetKind.MODEL:
            return value
        return format_html('{} <span class="muted">({})</span>', value, record.target_kind)

    def render_pass_hat_k(self, value: list[float]) -> str:
        if not value:
            return "—"  # nothing evaluated
        return format_html('{} <span class="muted">(k={})</span>', f"{value[-1]:.3f}", len(value))

    def render_cost_nanousd(self, value: int, record: BenchmarkRun) -> str:
        return format_html('{} <span class="muted">{}</span>', cost_of(record), cost_source_label(record.cost_source))


class TaskGridTable(tables.Table):
    """Rows are tasks; the view adds one OutcomeColumn per trial."""

    task_id = tables.Column(verbose_name="Task", order_by=("task_key",))
    pass_rate = RateColumn(verbose_name="Pass rate")
    successes = tables.Column(verbose_name="Passed", attrs=NumberColumn.attrs)

    class Meta:
        attrs = {"class": "report grid"}
        order_by = ("task_id",)

    def render_successes(self, value: int, record: dict[str, Any]) -> str:
        infra = record["infra_errors"]
        note = f" (+{infra} infra)" if infra else ""
        return f"{value}/{record['evaluated']}{note}"


class TerminationTable(tables.Table):
    reason = tables.Column(verbose_name="Termination reason")
    count = NumberColumn(verbose_name="Simulations")
    infra = NumberColumn(verbose_name="Of which infra errors")

    class Meta:
        attrs = ATTRS
        orderable = False


class SpendTable(tables.Table):
    day = tables.DateColumn(format="Y-m-d", attrs={"td": {"class": "nowrap"}})
    requested_model = tables.Column(verbose_name="Model")
    calls = NumberColumn()
    errors = NumberColumn()
    unpriced_calls = NumberColumn(verbose_name="Unpriced")
    prompt_tokens = NumberColumn(verbose_name="Prompt tokens")
    completion_tokens = NumberColumn(verbose_name="Completion tokens")
    cost_nanousd = UsdColumn(verbose_name="Cost")

    class Meta:
        attrs = ATTRS
        per_page = 50
        order_by = ("-day", "-cost_nanousd")
        empty_text = "No spend in this range."


class TraceTable(tables.Table):
    started_at = tables.DateTimeColumn(
        verbose_name="Started (UTC)",
        format="Y-m-d H:i:s",
        linkify=("reports:trace", {"pk": A("pk")}),
        attrs={"td": {"class": "nowrap"}},
    )
    request_id = tables.Column(verbose_name="Request id", attrs={"td": {"class": "nowrap"}})
    key_name = tables.Column(verbose_name="Key")
    requested_model = tables.Column(verbose_name="Model")
    formation_label = tables.Column(verbose_name="Formation label")
    session = tables.Column()
    status = tables.Column()
    http_status = tables.Column(verbose_name="HTTP")
    duration_ms = tables.Column(verbose_name="Duration", attrs=NumberColumn.attrs)
    prompt_tokens = NumberColumn(verbose_name="Prompt")
    completion_tokens = NumberColumn(verbose_name="Completion")
    cost_nanousd = UsdColumn(verbose_name="Cost")

    class Meta:
        model = Trace
        fields = ()
        attrs = ATTRS
        per_page = 50
        empty_text = "No traces match."
        row_attrs = {"class": lambda record: f"status-{record.status}"}

    def render_duration_ms(self, value: float) -> str:
        return duration(value)

    def render_requested_model(self, value: str) -> str:
        return breakable(value)

    def render_formation_label(self, value: str) -> str:
        return breakable(value)

    def render_status(self, value: str) -> str:
        return format_html('<span class="badge badge-{}">{}</span>', value, value)
