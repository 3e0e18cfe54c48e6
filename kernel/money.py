"""Money, in one place. Marina stores and sums integer nano-dollars (1e-9 USD):
exact on SQLite and PostgreSQL alike, where SQLite's DECIMAL sums drift like
floats. This module converts between nano-dollars, Decimal dollars and text;
the headers, the admin, the report pages, the commands and `compare` all
format through it, so one amount reads the same everywhere.

- `to_nanousd(dollars)`: a Decimal/str/int/float amount -> nano-dollars (half-even).
- `to_usd(nanousd)`: nano-dollars -> Decimal dollars (None stays None).
- `exact(nanousd)`: "0.012345000", 9 digits, nothing rounded: CSV exports.
- `plain(amount)`: "0.01234500", 8 fraction digits, no sign: headers, CSV, JSON.
- `dollars(amount)`: "$0.01234500", or a placeholder for an unknown amount: pages, admin, CLI.
- `signed_dollars(amount)`: "+$0.01234500" / "-$…": differences in `compare`.
- `short(amount)`: "$1,234.57" / "$0.0073": the pages people read, with `dollars` on hover
  (ledger/templatetags/ledger_format.py's `money` filter).

`amount` is nano-dollars (int) or dollars (Decimal/float); ints are always
nano-dollars, so a figure never changes scale by accident.
"""
from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from typing import overload

NANO = Decimal("1e-9")
NANOS_PER_USD = 1_000_000_000
PLACES = Decimal("1e-8")  # what every text form shows

Amount = int | Decimal | float | None


class MoneyError(ValueError):
    """An amount that is not a finite number of dollars."""


def to_nanousd(dollars: Decimal | str | int | float) -> int:
    """Dollars -> integer nano-dollars, rounded half-even. Refuses NaN/inf."""
    try:
        value = dollars if isinstance(dollars, Decimal) else Decimal(str(dollars))
        if not value.is_finite():
            raise MoneyError(f"not a finite amount: {dollars!r}")
        return int(value.quantize(NANO, rounding=ROUND_HALF_EVEN) * NANOS_PER_USD)
    except (InvalidOperation, ValueError) as exc:
        if isinstance(exc, MoneyError):
            raise
        raise MoneyError(f"not an amount of dollars: {dollars!r}") from None


@overload
def to_usd(nanousd: int) -> Decimal: ...
@overload
def to_usd(nanousd: None) -> None: ...
@overload
def to_usd(nanousd: int | None) -> Decimal | None: ...
def to_usd(nanousd: int | None) -> Decimal | None:
    return None if nanousd is None else Decimal(nanousd) * NANO


def _as_dollars(amount: Amount) -> Decimal | None:
    if amount is None:
        return None
    if isinstance(amount, bool):
        raise TypeError("a boolean is not an amount")
    if isinstance(amount, int):
        return Decimal(amount) * NANO
    return amount if isinstance(amount, Decimal) else Decimal(str(amount))


def plain(amount: Amount) -> str:
    """8 fraction digits, no currency sign ("" for an unknown amount)."""
    value = _as_dollars(amount)
    return "" if value is None else f"{value.quantize(PLACES, rounding=ROUND_HALF_EVEN):.8f}"


def exact(nanousd: int | None) -> str:
    """Every nano-dollar, 9 fraction digits: exports that others sum (CSV)."""
    if nanousd is None:
        return ""
    # Integer arithmetic: exact like Decimal, and a CSV export formats 100,000 of these.
    whole, fraction = divmod(abs(nanousd), 1_000_000_000)
    return f"{'-' if nanousd < 0 else ''}{whole}.{fraction:09d}"


def dollars(amount: Amount, *, unknown: str = "—") -> str:
    """"$0.01234500"; `unknown` for an amount nobody could price."""
    value = _as_dollars(amount)
    if value is None:
        return unknown
    text = plain(abs(value))
    return f"-${text}" if value < 0 else f"${text}"


def short(amount: Amount, *, unknown: str = "—", signed: bool = False) -> str:
    """As a person reads an amount: cents with thousands separators ($1,234.57), 4 places
    under a dollar ($0.0073), "<$0.0001" for less; `signed` for a difference (+$0.01).
    The exact figure (`dollars`) stays in tooltips, CSV and the API."""
    value = _as_dollars(amount)
    if value is None:
        return unknown
    sign = "-" if value < 0 else ("+" if signed else "")
    size = abs(value)
    if size and size < Decimal("0.00005"):
        return f"{sign}<$0.0001"
    places = Decimal("0.01") if size >= 1 or not size else Decimal("0.0001")
    return f"{sign}${size.quantize(places, rounding=ROUND_HALF_UP):,}"


def with_unpriced(amount: Amount, unpriced: int, *, per: str = "", fmt: Callable[[Amount], str] | None = None) -> str:
    """A total some of whose calls nobody could price: "$x" when none,
    "≥ $x (n unpriced)" when some (the priced part is a lower bound), and
    "unpriced (n calls)" when every call was (the amount is then None, or 0
    from the priced calls of none): unknown, never $0. `per` ("/item") follows
    the amount; `fmt` writes it (`dollars`, or `short` on a page)."""
    value = _as_dollars(amount)
    write = fmt or dollars
    if unpriced <= 0:
        return "unpriced" if value is None else f"{write(value)}{per}"
    if value is None or value == 0:
        return f"unpriced ({unpriced} call{'s' if unpriced != 1 else ''})"
    return f"≥ {write(value)}{per} ({unpriced} unpriced)"


def signed_dollars(amount: Amount, *, unknown: str = "—") -> str:
    """A difference: always signed, "+$0.00000000" for none."""
    value = _as_dollars(amount)
    if value is None:
        return unknown
    return f"{'-' if value < 0 else '+'}${plain(abs(value))}"
