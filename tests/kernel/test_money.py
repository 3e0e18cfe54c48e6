"""kernel.money: nano-dollars to text, exactly."""
from __future__ import annotations

import random
from decimal import Decimal

import pytest

from kernel import money


@pytest.mark.parametrize(
    ("nanousd", "text"),
    [(None, ""), (0, "0.000000000"), (5, "0.000000005"), (1_000_000_000, "1.000000000"),
     (123_456_789_012, "123.456789012"), (-1_234_567_891, "-1.234567891"), (-5, "-0.000000005")],
)  # fmt: skip
def test_exact_writes_every_nano_dollar(nanousd: int | None, text: str) -> None:
    assert money.exact(nanousd) == text


def test_exact_agrees_with_decimal_arithmetic() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randint(-(10**15), 10**15)
        assert Decimal(money.exact(n)) == Decimal(n) * money.NANO
