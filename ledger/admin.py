"""The Django admin for the ledger: for browsing and for the few corrections
allowed (a run's group and label). Items, traces, spans and spend are
append-only records, so the admin only shows them."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from ledger.admin_scale import CappedCountPaginator, CostSourceFilter, StatusFilter
from ledger.benchmarks.cost_sources import cost_source_label
from ledger.lessons import services as lessons
from ledger.models import (
    ApiKey,
    BenchmarkItem,
    BenchmarkRun,
    Experiment,
    ExperimentRun,
    Lesson,
    Span,
    SpendDaily,
    Trace,
)
from ledger.spend import keys as stored_keys
from ledger.spend.selectors import spend_sums
from ledger.templatetags.ledger_format import breakable, cost_of, duration, grouped, money_html, readable_list


def _column(field: str, description: str, render: Callable[[Any], str]) -> Any:
    """A list column showing `field` through `render`, sortable by the field."""

    @admin.display(description=description, ordering=field)
    def shown(self: admin.ModelAdmin, obj: Any) -> str:
        return render(getattr(obj, field))

    return shown


def _wrapping(field: str, description: str) -> Any:
    """A long id or model that wraps only after its separators
    (static/ledger/admin.css keeps every other cell on one line)."""
    return _column(field, description, breakable)


def _count(field: str, description: str) -> Any:
    """A count with thousands separators (tokens: 12,345)."""
    return _column(field, description, grouped)


def _when(field: str, description: str) -> Any:
    """A time as `2026-12-06 02:18` (UTC), short enough to stay on one line."""
    return _column(field, description, lambda value: "—" if value is None else value.strftime("%Y-%m-%d %H:%M"))


def _duration(field: str, description: str) -> Any:
    """Milliseconds as a person reads them: 840 ms, 5.97 s."""
    return _column(field, description, duration)


class ReadOnlyAdmin(admin.ModelAdmin):
    """View-only: the ledger is written by Marina and the importer, never by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# Module constants, not class attributes, so their items type as str: in the class body
# the stubs widen them to Django's field groups (a str or a tuple of them).
_RUN_FIELDS = (
    "group", "label", "benchmark", "domain", "target_kind", "target", "num_trials", "task_split", "seed",
    "retrieval_config", "retrieval_config_kwargs",
    "agent_model", "user_model", "agent_args", "user_args", "tau2_version", "tau2_commit",
    "simulations", "infra_errors", "status", "mean_reward_shown", "pass_hat_k_shown", "comparable",
    "reasons", "cost", "cost_source", "started_at", "ended_at", "created_at",
    "source_sha256", "links",
)  # fmt: skip


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(admin.ModelAdmin):
    list_display = [
        "id", "group_shown", "benchmark_shown", "target_shown", "simulations", "infra_errors",
        "mean_reward_shown", "pass1", "pass_k", "cost", "comparable", "created", "links",
    ]  # fmt: skip
    list_display_links = ["id"]
    list_filter = [
        "benchmark", "target_kind", "comparable", "status", "cost_source", "retrieval_config", "group", "created_at",
    ]  # fmt: skip
    search_fields = ["target", "group", "label", "benchmark", "agent_model", "source_sha256"]
    date_hierarchy = "created_at"
    # Only group and label may change after import; everything else is the run as imported.
    fields = _RUN_FIELDS
    readonly_fields = [f for f in _RUN_FIELDS if f not in ("group", "label")]

    group_shown = _wrapping("group", "group")
    benchmark_shown = _wrapping("benchmark", "benchmark")
    created = _when("created_at", "created (UTC)")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # runs come from `manage.py import_tau2`

    @admin.display(description="target", ordering="target")
    def target_shown(self, run: BenchmarkRun) -> str:
        """The target, and its kind when it is not a model (as the runs page writes it)."""
        if run.target_kind == BenchmarkRun.TargetKind.MODEL:
            return breakable(run.target)
        return format_html('{} <span class="quiet">({})</span>', breakable(run.target), run.target_kind)

    @admin.display(description="comparability reasons")
    def reasons(self, run: BenchmarkRun) -> str:
        return readable_list(run.comparability_reasons)

    @admin.display(description="mean reward", ordering="mean_reward")
    def mean_reward_shown(self, run: BenchmarkRun) -> str:
        return "—" if run.mean_reward is None else f"{run.mean_reward:.3f}"

    @admin.display(description="pass^1..pass^k")
    def pass_hat_k_shown(self, run: BenchmarkRun) -> str:
        return ", ".join(f"{p:.3f}" for p in run.pass_hat_k) or "—"

    @admin.display(description="pass^1")
    def pass1(self, run: BenchmarkRun) -> str:
        return f"{run.pass_hat_k[0]:.3f}" if run.pass_hat_k else "—"

    @admin.display(description="pass^k")
    def pass_k(self, run: BenchmarkRun) -> str:
        return f"{run.pass_hat_k[-1]:.3f} (k={len(run.pass_hat_k)})" if run.pass_hat_k else "—"

    @admin.display(description="cost", ordering="cost_nanousd")
    def cost(self, run: BenchmarkRun) -> str:
        if run.cost_source == "none":
            return cost_of(run)  # "— unpriced", the source in the same word
        label = cost_source_label(run.cost_source)
        return format_html('{} <span class="quiet" title="{}">{}</span>', cost_of(run), label, run.cost_source)

    @admin.display(description="")
    def links(self, run: BenchmarkRun) -> str:
        items = reverse("admin:ledger_benchmarkitem_changelist") + f"?run__id__exact={run.pk}"
        return format_html(
            '<a href="{}">items</a> · <a href="{}">report</a>', items, reverse("reports:run", args=[run.pk])
        )


@admin.register(BenchmarkItem)
class BenchmarkItemAdmin(ReadOnlyAdmin):
    list_display = [
        "item_shown", "run_link", "task_shown", "trial", "reward_shown", "correct", "infra_error",
        "termination_reason", "duration", "agent_cost", "user_cost",
    ]  # fmt: skip
    # Floats as the reports show them (kernel.money for dollars), never as raw
    # binary floats such as 597.0618970000032.
    exclude = ["reward", "duration_s", "agent_cost_usd", "user_cost_usd"]
    readonly_fields = ["reward_shown", "duration", "agent_cost", "user_cost"]
    # Booleans only: a filter on a plain field scans every item for its values (admin_scale).
    list_filter = ["correct", "infra_error", "skipped"]
    search_fields = ["item_id__exact", "task_id__exact"]  # exact: a substring search reads every item
    ordering = ["-pk"]  # newest first, by the primary key: the model's (run, task, trial) sorts every item
    list_select_related = ["run"]
    raw_id_fields = ["run"]
    paginator = CappedCountPaginator
    show_full_result_count = False

    list_display_links = ["item_shown"]
    item_shown = _wrapping("item_id", "item")
    task_shown = _wrapping("task_id", "task")

    @admin.display(description="reward", ordering="reward")
    def reward_shown(self, item: BenchmarkItem) -> str:
        return "—" if item.reward is None else f"{item.reward:.3f}"

    @admin.display(description="duration", ordering="duration_s")
    def duration(self, item: BenchmarkItem) -> str:
        return "—" if item.duration_s is None else f"{item.duration_s:.1f} s"

    @admin.display(description="agent cost (τ²)", ordering="agent_cost_usd")
    def agent_cost(self, item: BenchmarkItem) -> str:
        return money_html(item.agent_cost_usd)

    @admin.display(description="user cost (τ²)", ordering="user_cost_usd")
    def user_cost(self, item: BenchmarkItem) -> str:
        return money_html(item.user_cost_usd)

    @admin.display(description="run", ordering="run")
    def run_link(self, item: BenchmarkItem) -> str:
        url = reverse("admin:ledger_benchmarkrun_change", args=[item.run_id])
        return format_html('<a href="{}">{}</a>', url, breakable(item.run))


class SpanInline(admin.TabularInline):
    model = Span
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "seq", "parent_seq", "name", "provider", "upstream_model", "status", "http_status", "took",
        "ttft", "prompt", "completion", "cost", "cost_source", "decisions",
    )  # fmt: skip
    readonly_fields = fields
    took = _duration("duration_ms", "duration")
    ttft = _duration("ttft_ms", "time to first token")
    prompt = _count("prompt_tokens", "prompt tokens")
    completion = _count("completion_tokens", "completion tokens")

    @admin.display(description="cost")
    def cost(self, span: Span) -> str:
        return money_html(span.cost_nanousd)

    @admin.display(description="detail")
    def decisions(self, span: Span) -> str:
        return readable_list(span.detail)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Trace)
class TraceAdmin(ReadOnlyAdmin):
    list_display = [
        "started", "request_shown", "key_shown", "model_shown", "route", "label_shown", "status",
        "http_status", "took", "prompt", "completion", "cost", "report",
    ]  # fmt: skip
    # Fixed choices and booleans only, and no date hierarchy: each would scan
    # every trace for its values on each page (ledger/admin_scale.py).
    list_filter = [StatusFilter, "stream"]
    # Exact matches: a substring search reads every trace (the report's trace page filters too).
    # The indexed request id only: any other column, even exactly, reads every trace
    # (the report's trace page filters by model, key, status and session).
    search_fields = ["request_id__exact"]
    paginator = CappedCountPaginator
    # Bodies stay out of the admin: the report page shows them, redacted again.
    exclude = ["body", "cost_nanousd"]
    readonly_fields = ["cost", "report"]
    inlines = [SpanInline]
    show_full_result_count = False  # no COUNT(*) over every trace on each page
    list_display_links = ["started"]
    started = _when("started_at", "started (UTC)")
    took = _duration("duration_ms", "duration")
    request_shown = _wrapping("request_id", "request id")
    key_shown = _wrapping("key_name", "key")
    model_shown = _wrapping("requested_model", "requested model")
    label_shown = _wrapping("formation_label", "formation label")
    prompt = _count("prompt_tokens", "prompt tokens")
    completion = _count("completion_tokens", "completion tokens")

    @admin.display(description="cost", ordering="cost_nanousd")
    def cost(self, trace: Trace) -> str:
        return money_html(trace.cost_nanousd)

    @admin.display(description="")
    def report(self, trace: Trace) -> str:
        return format_html('<a href="{}">span tree</a>', reverse("reports:trace", args=[trace.pk]))


@admin.register(Span)
class SpanAdmin(ReadOnlyAdmin):
    list_display = [
        "trace_shown", "seq", "parent_seq", "name", "provider", "model_shown", "status", "took",
        "prompt", "completion", "cost", "cost_source",
    ]  # fmt: skip
    list_display_links = ["trace_shown"]
    took = _duration("duration_ms", "duration")
    model_shown = _wrapping("upstream_model", "upstream model")
    prompt = _count("prompt_tokens", "prompt tokens")
    completion = _count("completion_tokens", "completion tokens")
    list_filter = [StatusFilter, CostSourceFilter]
    search_fields = ["trace__request_id__exact"]  # exact: a substring search reads every span
    ordering = ["-pk"]  # the model's (trace, seq) joins every trace to sort by its time
    list_select_related = ["trace"]
    raw_id_fields = ["trace"]
    paginator = CappedCountPaginator
    exclude = ["body", "cost_nanousd", "detail"]
    readonly_fields = ["cost", "decisions"]
    show_full_result_count = False

    @admin.display(description="cost", ordering="cost_nanousd")
    def cost(self, span: Span) -> str:
        return money_html(span.cost_nanousd)

    @admin.display(description="trace", ordering="trace")
    def trace_shown(self, span: Span) -> str:
        return breakable(span.trace)

    @admin.display(description="detail")
    def decisions(self, span: Span) -> str:
        return readable_list(span.detail)


@admin.register(SpendDaily)
class SpendDailyAdmin(ReadOnlyAdmin):
    list_display = [
        "day", "key_shown", "requested_shown", "provider", "upstream_shown", "calls_shown", "errors",
        "unpriced_calls", "prompt", "completion", "cost",
    ]  # fmt: skip
    list_filter = ["key_name"]  # models and providers: search for one (each filter is a DISTINCT over every row)
    search_fields = ["requested_model__exact", "upstream_model__exact", "key_name__exact"]
    date_hierarchy = "day"
    ordering = ["-day", "-cost_nanousd"]
    exclude = ["cost_nanousd"]
    readonly_fields = ["cost"]
    list_display_links = ["day"]
    key_shown = _wrapping("key_name", "key")
    requested_shown = _wrapping("requested_model", "requested model")
    upstream_shown = _wrapping("upstream_model", "upstream model")
    calls_shown = _count("calls", "calls")
    prompt = _count("prompt_tokens", "prompt tokens")
    completion = _count("completion_tokens", "completion tokens")

    @admin.display(description="cost (USD)", ordering="cost_nanousd")
    def cost(self, row: SpendDaily) -> str:
        return money_html(row.cost_nanousd)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        # Totals over every row the filters select, not only this page.
        if isinstance(response, TemplateResponse) and response.context_data and "cl" in response.context_data:
            queryset: QuerySet[SpendDaily] = response.context_data["cl"].queryset
            response.context_data["spend_totals"] = spend_sums(queryset)
        return response


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Keys made with `manage.py create_key` (the secret is shown once, there):
    only the hash is stored, so the admin lists and revokes, never makes."""

    list_display = ["name", "prefix_shown", "reads_all", "created_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name"]
    exclude = ["digest"]
    actions = ["revoke"]

    @admin.display(description="secret starts")
    def prefix_shown(self, key: ApiKey) -> str:
        return f"{key.prefix}…"

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = sum(stored_keys.revoke(key.name) for key in queryset)
        self.message_user(request, f"Revoked {revoked} key(s); every server refuses them within a few seconds.")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and bool(request.user.is_superuser)  # the revoke action, not an edit form


_EXPERIMENT_RUN_FIELDS = ("arm", "replicate", "agent_model", "group", "outcome", "detail", "simulations", "run")


class ExperimentRunInline(admin.TabularInline):
    model = ExperimentRun
    fields = _EXPERIMENT_RUN_FIELDS
    readonly_fields = _EXPERIMENT_RUN_FIELDS
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Experiment)
class ExperimentAdmin(ReadOnlyAdmin):
    """`manage.py repro_tau2`'s experiments, with their runs; written by the kit only.
    The report page /reports/experiments/<id>/ shows the arms side by side."""

    list_display = ["name", "status", "arms", "spent", "started_at", "ended_at"]
    list_filter = ["status", "domain"]
    search_fields = ["name", "key_name"]
    inlines = [ExperimentRunInline]

    @admin.display(description="spent")
    def spent(self, experiment: Experiment) -> str:
        return money_html(experiment.spent_nanousd)


@admin.register(Lesson)
class LessonAdmin(admin.ModelAdmin):
    """Lessons as learned (`manage.py learn_lessons`): listed, searched, promoted
    to trusted (recalled first) and retired (never recalled again). The rule
    and its provenance are as the leak guard let them in: not edited here."""

    list_display = ["id", "rule", "domain", "trust", "retired", "support", "benchmark", "run", "created_at"]
    list_filter = ["trust", "retired", "domain", "benchmark", "created_at"]
    search_fields = ["rule", "benchmark", "source_name", "judge_model"]
    date_hierarchy = "created_at"
    actions = ["promote", "retire"]
    readonly_fields = [
        "rule", "domain", "trust", "benchmark", "run", "item_ids", "source_name", "judge_model", "support",
        "retired", "created_at", "updated_at", "promoted_at", "retired_at",
    ]  # fmt: skip

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # lessons come from learning, through the leak guard

    @admin.action(description="Promote the selected lessons to trusted", permissions=["change"])
    def promote(self, request: HttpRequest, queryset: QuerySet[Lesson]) -> None:
        self.message_user(request, f"Promoted {lessons.promote(queryset)} lesson(s) to trusted.")

    @admin.action(description="Retire the selected lessons (never recalled again)", permissions=["change"])
    def retire(self, request: HttpRequest, queryset: QuerySet[Lesson]) -> None:
        self.message_user(request, f"Retired {lessons.retire(queryset)} lesson(s).")
