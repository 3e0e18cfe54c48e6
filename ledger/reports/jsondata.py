"""The report pages' figures as JSON-ready data, for the read API
(marina/read_api.py). Every figure comes from the selector the page uses
(ledger.reports.selectors, ledger.spend.selectors) or the function the command
line prints (ledger.reports.compare_json.as_json, ledger.spend.cli.spend_dict);
this module only names the fields. Money is a decimal string of dollars (as
the CLI's JSON), times are ISO 8601 in UTC."""
from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django.db.models import QuerySet

from kernel import money
from kernel.redact import redact
from ledger.benchmarks.cost_sources import cost_source_label
from ledger.models import BenchmarkItem, BenchmarkRun, Trace
from ledger.reports.selectors import RunReport, SpanNode
from ledger.spend.cli import spend_dict
from ledger.spend.selectors import SpendByModel, SpendTotals


def _usd(nanousd: int | None) -> str | None:
    return None if nanousd is None else money.plain(nanousd)


def _time(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def run_summary(run: BenchmarkRun) -> dict[str, Any]:
    """A run as the runs page lists it, and its settings."""
    return {
        "id": run.pk,
        "benchmark": run.benchmark,
        "domain": run.domain,
        "target_kind": run.target_kind,
        "target": run.target,
        "group": run.group,
        "label": run.label,
        "status": run.status,
        "invalid_reason": run.invalid_reason,
        "judge": run.judge,
        "seed": run.seed,
        "task_split": run.task_split,
        "retrieval_config": run.retrieval_config or None,
        "retrieval_config_kwargs": run.retrieval_config_kwargs,
        "num_trials": run.num_trials,
        "agent_model": run.agent_model,
        "user_model": run.user_model,
        "tau2_version": run.tau2_version,
        "simulations": run.simulations,
        "evaluated": run.evaluated,
        "infra_errors": run.infra_errors,
        "skipped": run.skipped,
        "mean_reward": run.mean_reward,
        "pass_hat_k": run.pass_hat_k,
        "cost_usd": _usd(run.cost_nanousd),
        "cost_per_item_usd": money.plain(run.cost_per_item_usd) or None,
        "cost_source": run.cost_source,
        "comparable": run.comparable,
        "comparability_reasons": run.comparability_reasons,
        "source_name": run.source_name,
        "started_at": _time(run.started_at),
        "ended_at": _time(run.ended_at),
        "created_at": _time(run.created_at),
    }


def run_page(runs: QuerySet[BenchmarkRun], *, page: int, per_page: int) -> dict[str, Any]:
    count = runs.count()
    start = (page - 1) * per_page
    return {
        "count": count,
        "page": page,
        "per_page": per_page,
        "pages": max(1, -(-count // per_page)),
        "runs": [run_summary(r) for r in runs[start : start + per_page]],
    }


def item(i: BenchmarkItem) -> dict[str, Any]:
    return {
        "item_id": i.item_id,
        "task_id": i.task_id,
        "trial": i.trial,
        "reward": i.reward,
        "correct": i.correct,
        "infra_error": i.infra_error,
        "skipped": i.skipped,
        "termination_reason": i.termination_reason,
        "duration_s": i.duration_s,
        "link_status": i.link_status,
        "trace_calls": i.trace_calls,
        "trace_errors": i.trace_errors,
        "trace_unpriced": i.trace_unpriced,
        "trace_prompt_tokens": i.trace_prompt_tokens,
        "trace_completion_tokens": i.trace_completion_tokens,
        "trace_cost_usd": _usd(i.trace_cost_nanousd),
        "decisions": i.decisions,
        "formation_counters": i.formation_counters,
    }


def run_detail(report: RunReport) -> dict[str, Any]:
    """What the run page shows: figures recomputed from the items, the pass^k
    curve with its intervals, the termination reasons and every item."""
    s = report.summary
    return {
        **run_summary(report.run),
        "cost_source_label": cost_source_label(report.run.cost_source),
        # Import strips credentials; redacted again, as the page does, so no answer holds one.
        "agent_args": redact(report.run.agent_args),
        "user_args": redact(report.run.user_args),
        "figures": {
            "simulations": s.simulations, "infra_errors": s.infra_errors, "tasks": s.tasks,
            "mean_reward": s.mean_reward, "pass_hat_k": s.pass_hat_k,
        },  # fmt: skip
        "curve": {
            "confidence": report.confidence,
            "points": [{"k": p.k, "value": p.value, "lo": p.lo, "hi": p.hi} for p in report.curve],
        },
        "terminations": report.terminations,
        "items": [item(i) for i in report.run.items.order_by("task_id", "trial")],
    }


def spend(totals: SpendTotals, by_day: SpendByModel) -> dict[str, Any]:
    """The spend command's figures (per model and in total) and the spend page's per-day ones."""
    days = [d.isoformat() for d in by_day.days]
    return {
        "since": by_day.since.isoformat(),
        "until": by_day.until.isoformat(),
        **spend_dict(totals),
        "days": days,
        "cost_usd_by_day": {m: [money.plain(v) for v in by_day.cost[m]] for m in by_day.models},
        "rows": [
            {**{k: v for k, v in r.items() if k != "cost_nanousd"}, "day": _day(r["day"]), "cost_usd": money.plain(r["cost_nanousd"])}
            for r in by_day.rows
        ],
    }


def _day(value: date) -> str:
    return value.isoformat()


def trace(t: Trace, nodes: list[SpanNode]) -> dict[str, Any]:
    """A trace and its span tree, as the trace page shows them (bodies redacted again)."""
    return {
        "request_id": t.request_id,
        "started_at": _time(t.started_at),
        "duration_ms": t.duration_ms,
        "overhead_ms": t.overhead_ms,
        "method": t.method,
        "path": t.path,
        "key_name": t.key_name,
        "requested_model": t.requested_model,
        "route": t.route,
        "formation_label": t.formation_label,
        "session": t.session,
        "stream": t.stream,
        "status": t.status,
        "http_status": t.http_status,
        "error_kind": t.error_kind,
        "error_message": t.error_message,
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "cost_usd": _usd(t.cost_nanousd),
        "body": redact(t.body) if t.body is not None else None,
        "items": [
            {"run_id": link.item.run_id, "item_id": link.item.item_id, "role": link.role}
            for link in t.item_links.select_related("item").order_by("pk")
        ],
        "spans": [
            {
                "seq": n.span.seq, "parent_seq": n.span.parent_seq, "depth": n.depth, "name": n.span.name,
                "provider": n.span.provider, "upstream_model": n.span.upstream_model, "status": n.span.status,
                "http_status": n.span.http_status, "error_kind": n.span.error_kind, "offset_ms": n.offset_ms,
                "duration_ms": n.span.duration_ms, "ttft_ms": n.span.ttft_ms, "prompt_tokens": n.span.prompt_tokens,
                "completion_tokens": n.span.completion_tokens, "cached_tokens": n.span.cached_tokens,
                "reasoning_tokens": n.span.reasoning_tokens, "cost_usd": _usd(n.span.cost_nanousd),
                "cost_source": n.span.cost_source, "detail": n.span.detail,
                "body": redact(n.span.body) if n.span.body is not None else None,
            }
            for n in nodes
        ],  # fmt: skip
    }
