"""How the report pages and the admin write figures for a person: money one way (`money`,
`money_html`: cents, the exact figure on hover), counts, rates, shares and durations, long ids
that wrap only after separators (`breakable`), JSON fields as lists (`readable_list`) and
formation decisions as words (`words`)."""
from __future__ import annotations

import re

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from kernel import money

register = template.Library()


@register.filter
def usd(nanousd: int | None) -> str:
    """Integer nano-dollars as exact dollars with 8 decimals: for tooltips and exports."""
    return money.dollars(nanousd)


@register.filter
def grouped(count: int | None) -> str:
    """A count with thousands separators: 1,234,567."""
    return "—" if count is None else f"{count:,}"


def money_html(amount: money.Amount, reason: str = "", *, signed: bool = False) -> SafeString:
    """The one way a page or the admin shows money to a person: `money.short` ($1,234.57,
    $0.0073) with the exact figure on hover; an amount nobody priced as "—" and why
    (`reason`, e.g. "unpriced"), never $0."""
    if amount is None:
        if not reason:
            return mark_safe('<span class="money unknown" title="unknown amount">—</span>')
        return format_html('<span class="money unknown" title="{}">— <span class="why">{}</span></span>', reason, reason)
    exact = money.signed_dollars(amount) if signed else money.dollars(amount)
    return format_html('<span class="money" title="{} exactly">{}</span>', exact, money.short(amount, signed=signed))


@register.filter(name="money")
def money_filter(amount: money.Amount, reason: str = "") -> SafeString:
    """`{{ run.cost_nanousd|money:"unpriced" }}`: see `money_html`."""
    return money_html(amount, reason)


@register.filter
def cost_of(record: object) -> SafeString:
    """A run's (or any record's) `cost_nanousd` beside its `unpriced_calls`, as `money.with_unpriced`
    words it, the amount through `money_html`: "$1.23", "≥ $1.23 (2 unpriced)", "— unpriced (40 calls)"."""
    amount: int | None = getattr(record, "cost_nanousd", None)
    unpriced: int = getattr(record, "unpriced_calls", 0) or 0
    if unpriced <= 0:
        return money_html(amount, "unpriced")
    if not amount:
        return money_html(None, f"unpriced ({unpriced} call{'s' if unpriced != 1 else ''})")
    return format_html("≥ {} ({} unpriced)", money_html(amount), unpriced)


@register.filter
def signed_money(amount: money.Amount) -> SafeString:
    """A difference (+$0.0120), exact on hover."""
    return money_html(amount, signed=True)


@register.filter
def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


@register.filter
def percent(share: float | None) -> str:
    """A 0..1 share as a whole percent; a share that rounds to 0 but is not 0 reads "<1 %"."""
    if share is None:
        return "—"
    if 0 < share < 0.005:
        return "<1 %"
    return f"{share * 100:.0f} %"


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
    """A duration in milliseconds as a person reads it: "840 ms" under a second, "5.97 s" above."""
    return duration(value)


def duration(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) < 1000:
        return f"{value:,.0f} ms" if abs(value) >= 10 else f"{value:.1f} ms"
    return f"{value / 1000:,.2f} s"


_SEPARATORS = re.compile(r"([/:_.@;=-])")


@register.filter
def breakable(text: object) -> SafeString:
    """A long id or model (`marina/verify:demo/alpha-large`, a request id) that may wrap only
    after its separators, never inside a word or a number (`<wbr>`, escaped text)."""
    if text is None or text == "":
        return mark_safe("—" if text is None else "")
    parts = _SEPARATORS.split(str(text))
    marked = format_html_join("", "{}{}", ((part, mark_safe("<wbr>") if _SEPARATORS.fullmatch(part) else "") for part in parts))
    return format_html('<span class="breakable">{}</span>', marked)


def readable_list(value: object) -> SafeString:
    """A JSON field (a span's detail, a run's comparability reasons) as a list a person reads:
    a dict as `key: value` lines, a list as its items, each value in words (`words`)."""
    if value in (None, {}, []):
        return mark_safe('<span class="muted">none</span>')
    if isinstance(value, dict):
        rows = ((_key(k), words(v)) for k, v in value.items())
        return format_html('<ul class="readable">{}</ul>', format_html_join("", "<li><b>{}</b>: {}</li>", rows))
    if isinstance(value, (list, tuple)):
        items = ((_record(v) if isinstance(v, dict) else words(v),) for v in value)
        return format_html('<ul class="readable">{}</ul>', format_html_join("", "<li>{}</li>", items))
    return format_html("{}", words(value))


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
