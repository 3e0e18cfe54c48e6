"""Number formats shared by the report templates."""
from __future__ import annotations

from decimal import Decimal

from django import template

from kernel import money

register = template.Library()


@register.filter
def usd(nanousd: int | None) -> str:
    """Integer nano-dollars as exact dollars with 8 decimals."""
    return money.dollars(nanousd)


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
