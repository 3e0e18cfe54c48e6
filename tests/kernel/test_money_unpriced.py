"""Unpriced is unknown, never $0: the text of a total some of whose calls nobody priced."""
from __future__ import annotations

from decimal import Decimal

from kernel import money


def test_a_total_with_unpriced_calls_is_a_lower_bound_or_unknown():
    assert money.with_unpriced(1_500_000_000, 0) == "$1.50000000"
    assert money.with_unpriced(None, 0) == "unpriced"
    assert money.with_unpriced(None, 12) == "unpriced (12 calls)"
    assert money.with_unpriced(0, 1) == "unpriced (1 call)", "no priced call: not $0"
    assert money.with_unpriced(2_000, 3) == "≥ $0.00000200 (3 unpriced)"
    assert money.with_unpriced(Decimal("0.25"), 4, per="/item") == "≥ $0.25000000/item (4 unpriced)"
