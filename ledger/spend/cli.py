"""Spend totals (ledger.spend.selectors.spend_totals) as the `spend` command
prints them: a table of text, or JSON (which the read API's /api/spend
serves too, through ledger/reports/jsondata.py)."""
from __future__ import annotations

from typing import Any

from kernel import money
from ledger.spend.selectors import SpendTotals, spend_per_model


def spend_lines(totals: SpendTotals) -> list[str]:
    models = spend_per_model(totals)
    first, last = totals.first_day, totals.last_day
    days = f"{first}" if first == last and first else f"{first or '…'}..{last or '…'}"
    width = max([len(m.requested_model) for m in models] + [5])
    lines = [f"spend_daily, UTC days {days}" + ("" if models else ": no spend recorded")]
    lines.append(
        f"{'model':<{width}}  {'calls':>8}  {'errors':>6}  {'unpriced':>8}  "
        f"{'prompt':>12}  {'completion':>12}  cost usd"
    )
    for m in models:
        lines.append(
            f"{m.requested_model:<{width}}  {m.calls:>8}  {m.errors:>6}  {m.unpriced_calls:>8}  {m.prompt_tokens:>12}  "
            f"{m.completion_tokens:>12}  {money.plain(m.cost_nanousd)}"
        )
    lines.append(
        f"{'total':<{width}}  {totals.calls:>8}  {totals.errors:>6}  {totals.unpriced_calls:>8}  "
        f"{totals.prompt_tokens:>12}  {totals.completion_tokens:>12}  {money.plain(totals.cost_nanousd)}"
    )
    if totals.unpriced_calls:
        lines.append(f"{totals.unpriced_calls} unpriced call(s) are not in the cost: it is a lower bound")
    return lines


def spend_dict(totals: SpendTotals) -> dict[str, Any]:
    return {
        "first_day": totals.first_day.isoformat() if totals.first_day else None,
        "last_day": totals.last_day.isoformat() if totals.last_day else None,
        "models": [
            {
                "model": m.requested_model,
                "calls": m.calls,
                "errors": m.errors,
                "unpriced_calls": m.unpriced_calls,
                "prompt_tokens": m.prompt_tokens,
                "completion_tokens": m.completion_tokens,
                "cost_usd": money.plain(m.cost_nanousd),
            }
            for m in spend_per_model(totals)
        ],
        "total": {
            "calls": totals.calls,
            "errors": totals.errors,
            "unpriced_calls": totals.unpriced_calls,
            "prompt_tokens": totals.prompt_tokens,
            "completion_tokens": totals.completion_tokens,
            "cached_tokens": totals.cached_tokens,
            "reasoning_tokens": totals.reasoning_tokens,
            "cost_usd": money.plain(totals.cost_nanousd),
        },
    }
