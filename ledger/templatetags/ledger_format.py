"""Number formats shared by the report templates."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django import template

from kernel import money

register = template.Library()


@register.filter
def usd(nanousd: int | None) -> str:
    """Integer nano-dollars as exact dollars with 8 decimals."""
    return money.dollars(nanousd)


@register.filter
def grouped(count: int | None) -> str:
    """A count with thousands separators: 1,234,567."""
    return "—" if count is None else f"{count:,}"


@register.filter
def usd_grouped(nanousd: int | None) -> str:
    """Exact dollars (8 decimals) with thousands separators: $1,234.56789012."""
    text = money.dollars(nanousd)
    if not text.lstrip("-").startswith("$"):
        return text
    sign, rest = ("-", text[2:]) if text.startswith("-") else ("", text[1:])
    whole, _, fraction = rest.partition(".")
    return f"{sign}${int(whole):,}" + (f".{fraction}" if fraction else "")


@register.filter
def usd_short(nanousd: int | None) -> str:
    """Integer nano-dollars as a person reads them: cents with thousands separators
    ($1,234.57), 4 places under a dollar ($0.0073). The exact figure (`usd`) goes in
    the element's title, the CSV and the API."""
    if nanousd is None:
        return money.dollars(None)
    value = Decimal(nanousd) / Decimal(10**9)
    size = abs(value)
    if size and size < Decimal("0.00005"):
        return f"{'-' if value < 0 else ''}<$0.0001"
    places = Decimal("0.01") if size >= 1 or not size else Decimal("0.0001")
    shown = size.quantize(places, rounding=ROUND_HALF_UP)
    return f"{'-' if value < 0 else ''}${shown:,}"


@register.filter
def dollars(value: Decimal | float | None) -> str:
    """A dollar amount (Decimal or float) with 8 decimals."""
    return money.dollars(value)


@register.filter
def signed_dollars(value: Decimal | float | None) -> str:
    return money.signed_dollars(value)


@register.filter
def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


@register.filter
def signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"


@register.filter
def pvalue(value: float | None) -> str:
    if value is None:
        return "—"
    return "< 0.0001" if value < 1e-4 else f"{value:.4f}"


@register.filter
def ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f} ms"


@register.filter
def indent(depth: int) -> str:
    """Left padding of a span-tree row, in rem."""
    return f"{0.4 + 1.4 * depth:.1f}rem"


@register.filter
def words(value: object) -> str:
    """A formation's recorded decision as words, not Python's repr: `yes`/`no`,
    `none` for an empty list, `round 1: verdict unreadable` for a list of records."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        if not value:
            return "none"
        return ", ".join(f"{_key(k)} {words(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        return "; ".join(_record(v) if isinstance(v, dict) else words(v) for v in value)
    return str(value)


def _key(key: object) -> str:
    return str(key).replace("_", " ")


def _record(record: dict[object, object]) -> str:
    """`{'round': 1, 'verdict': 'unreadable'}` -> `round 1: verdict unreadable`."""
    items = list(record.items())
    if items and _key(items[0][0]) in ("round", "turn", "attempt") and len(items) > 1:
        (first, number), rest = items[0], items[1:]
        return f"{_key(first)} {words(number)}: " + ", ".join(f"{_key(k)} {words(v)}" for k, v in rest)
    return ", ".join(f"{_key(k)} {words(v)}" for k, v in items)
