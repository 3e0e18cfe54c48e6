"""Reads of spend_daily: the cap's running total, the `spend` command, /v1/models'
recent ids and the spend report."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

from django.db.models import F, Q, QuerySet, Sum, Value
from django.db.models.functions import Substr
from django.db.models.lookups import Exact

from ledger.models import SpendDaily


def utc_today() -> date:
    return datetime.now(UTC).date()


def spent_nanousd(day: date) -> int:
    return SpendDaily.objects.filter(day=day).aggregate(total=Sum("cost_nanousd"))["total"] or 0


@dataclass(frozen=True)
class KeySpend:
    calls: int
    unpriced_calls: int
    cost_nanousd: int  # the priced calls'
    unpriced_tokens: int  # prompt + completion tokens of the unpriced calls (estimated per model row)


def key_spend(key_name: str) -> KeySpend:
    """One key's calls (all days): what they cost, how many nobody could price
    and about how many tokens those carried (a row's tokens in the share of its
    unpriced calls: rows are per model, and a model is priced or not)."""
    calls = unpriced = cost = tokens = 0
    rows = SpendDaily.objects.filter(key_name=key_name).values_list(
        "calls", "unpriced_calls", "cost_nanousd", "prompt_tokens", "completion_tokens"
    )
    for n, u, c, prompt, completion in rows:
        calls, unpriced, cost = calls + n, unpriced + u, cost + (c or 0)
        if u and n:
            tokens += (prompt + completion) * u // n
    return KeySpend(calls, unpriced, cost, tokens)


def spent_by_key(key_name: str) -> int:
    """Everything one key's calls have cost, in nano-dollars (all days)."""
    return SpendDaily.objects.filter(key_name=key_name).aggregate(total=Sum("cost_nanousd"))["total"] or 0


def owned_by(owner: str) -> Q:
    """The rows of one key: its own name, and its callers' `<name>/…` when it is
    an operator key (passthru/auth.py; no key name holds a `/`)."""
    return Q(key_name=owner) | key_name_under(owner + "/")


def key_name_under(prefix: str) -> Q:
    """Key names that begin with `prefix`, letter case and all. SQLite's LIKE
    (Django's startswith) ignores case: `ops`'s spend included `OPS/…`'s. The
    LIKE stays for PostgreSQL's index; the SUBSTR comparison is exact on both."""
    return Q(key_name__startswith=prefix) & Q(Exact(Substr("key_name", 1, len(prefix)), Value(prefix)))


def response_key(response_id: str) -> str | None:
    """The key whose call a Responses answer with this id was, if recorded."""
    from ledger.models import Trace

    return Trace.objects.filter(response_id=response_id).values_list("key_name", flat=True).first()


def owns(owner: str, key_name: str) -> bool:
    """owned_by(owner), for one row's key name."""
    return key_name == owner or key_name.startswith(owner + "/")


@dataclass
class SpendTotals:
    first_day: date | None
    last_day: date | None
    calls: int
    errors: int
    unpriced_calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    cost_nanousd: int
    rows: list[SpendDaily]


def spend_totals(*, since: date | None = None, until: date | None = None, owner: str | None = None) -> SpendTotals:
    """Spend between two UTC days, inclusive, with the rows behind it (only
    `owner`'s keys when given: owned_by)."""
    rows = SpendDaily.objects.all() if owner is None else SpendDaily.objects.filter(owned_by(owner))
    if since:
        rows = rows.filter(day__gte=since)
    if until:
        rows = rows.filter(day__lte=until)
    listed = list(rows.order_by("day", "key_name", "requested_model", "provider", "upstream_model"))
    return SpendTotals(
        first_day=listed[0].day if listed else since,
        last_day=listed[-1].day if listed else until,
        calls=sum(r.calls for r in listed),
        errors=sum(r.errors for r in listed),
        unpriced_calls=sum(r.unpriced_calls for r in listed),
        prompt_tokens=sum(r.prompt_tokens for r in listed),
        completion_tokens=sum(r.completion_tokens for r in listed),
        cached_tokens=sum(r.cached_tokens for r in listed),
        reasoning_tokens=sum(r.reasoning_tokens for r in listed),
        cost_nanousd=sum(r.cost_nanousd for r in listed),
        rows=listed,
    )


def spend_rows(*, since: date, until: date, columns: list[str]) -> Iterator[tuple[Any, ...]]:
    """The buckets between two UTC days, inclusive, as tuples of `columns`
    (for exports: no model instances), in a stable order."""
    rows = SpendDaily.objects.filter(day__gte=since, day__lte=until)
    ordered = rows.order_by("day", "key_name", "requested_model", "provider", "upstream_model")
    return ordered.values_list(*columns).iterator(chunk_size=10_000)


def recent_models(limit: int = 50) -> list[str]:
    """Requested model ids served in the last week, most used first (for /v1/models)."""
    since = utc_today().toordinal() - 7
    rows = (
        SpendDaily.objects.filter(day__gte=date.fromordinal(since))
        .values("requested_model")
        .annotate(n=Sum("calls"))
        .order_by("-n")[:limit]
    )
    return [r["requested_model"] for r in rows]


def recent_providers(limit: int = 50, owner: str | None = None) -> dict[str, set[str]]:
    """Requested model ids served in the last week (most used first) with the
    providers that served them, so /v1/models can drop ids whose provider is gone.
    Served means answered: an id whose every call failed (a typo the provider
    answered 404) is not offered to clients. With `owner`, only that key's
    calls (owned_by): one key does not learn the ids another called."""
    since = date.fromordinal(utc_today().toordinal() - 7)
    rows = (
        SpendDaily.objects.filter(owned_by(owner) if owner is not None else Q(), day__gte=since)
        .values("requested_model", "provider")
        .annotate(n=Sum("calls"), answered=Sum(F("calls") - F("errors")))
        .filter(answered__gt=0)
        .order_by("-n")
    )
    served: dict[str, set[str]] = {}
    for r in rows:
        if r["requested_model"] in served or len(served) < limit:
            served.setdefault(r["requested_model"], set()).add(r["provider"])
    return served


@dataclass
class ModelSpend:
    requested_model: str
    calls: int
    errors: int
    unpriced_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_nanousd: int


def spend_per_model(totals: SpendTotals) -> list[ModelSpend]:
    """The rows behind `totals` summed per requested model id (over days,
    keys and providers), most expensive first."""
    by_model: dict[str, ModelSpend] = {}
    for r in totals.rows:
        m = by_model.setdefault(r.requested_model, ModelSpend(r.requested_model, 0, 0, 0, 0, 0, 0))
        m.calls += r.calls
        m.errors += r.errors
        m.unpriced_calls += r.unpriced_calls
        m.prompt_tokens += r.prompt_tokens
        m.completion_tokens += r.completion_tokens
        m.cost_nanousd += r.cost_nanousd
    return sorted(by_model.values(), key=lambda m: (-m.cost_nanousd, m.requested_model))


# --- Spend -------------------------------------------------------------------------


@dataclass
class SpendByModel:
    """Daily spend between two days, per requested model: chart and table."""

    since: date
    until: date
    days: list[date]
    models: list[str]  # most expensive first
    cost: dict[str, list[int]]  # model -> nano-dollars per day, aligned with `days`
    rows: list[dict[str, Any]]  # day, requested_model, calls, errors, unpriced_calls, tokens, cost_nanousd
    totals: dict[str, int]


_SPEND_SUMS = ("calls", "errors", "unpriced_calls", "prompt_tokens", "completion_tokens", "cost_nanousd")


def spend_sums(rows: QuerySet[SpendDaily]) -> dict[str, int]:
    """Column totals of any spend_daily queryset (the admin's totals row)."""
    sums = rows.aggregate(**{name: Sum(name) for name in _SPEND_SUMS})
    return {name: sums[name] or 0 for name in _SPEND_SUMS}


def spend_by_model(*, since: date, until: date, owner: str | None = None) -> SpendByModel:
    """Spend per UTC day and requested model, every day of the range present
    (a day without calls is a zero, not a gap); only `owner`'s keys when given."""
    scoped = SpendDaily.objects.all() if owner is None else SpendDaily.objects.filter(owned_by(owner))
    # cast: django-stubs types .values() rows from the named fields alone and cannot see
    # the sums that annotate(**...) adds to them.
    rows = cast(
        list[dict[str, Any]],
        list(
            scoped.filter(day__gte=since, day__lte=until)
            .values("day", "requested_model")
            .annotate(**{name: Sum(name) for name in _SPEND_SUMS})
            .order_by("day", "requested_model")
        ),
    )
    days = [since + timedelta(days=n) for n in range((until - since).days + 1)]
    index = {d: n for n, d in enumerate(days)}
    cost: dict[str, list[int]] = {}
    for r in rows:
        cost.setdefault(r["requested_model"], [0] * len(days))[index[r["day"]]] += r["cost_nanousd"]
    models = sorted(cost, key=lambda m: (-sum(cost[m]), m))
    totals = {name: sum(r[name] for r in rows) for name in _SPEND_SUMS}
    return SpendByModel(since=since, until=until, days=days, models=models, cost=cost, rows=rows, totals=totals)
