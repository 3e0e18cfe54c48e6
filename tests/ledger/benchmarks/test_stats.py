"""ledger.benchmarks.stats against hand-computed cases and published values."""
from __future__ import annotations

import random
from fractions import Fraction
from math import comb, sqrt

import pytest

from ledger.benchmarks.stats import (
    Z95,
    mcnemar_exact_p,
    percentile,
    percentile_interval,
    task_bootstrap,
    two_stage_bootstrap,
    wilson_interval,
)


# --- Wilson -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single
        # proportion", Stat. Med. 17:857-872, method 3 (score, no continuity correction).
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0000, 0.1611),
        (1, 29, 0.0061, 0.1718),
        # Commonly tabulated small cases.
        (8, 10, 0.4902, 0.9433),
        (0, 10, 0.0000, 0.2775),
        (10, 10, 0.7225, 1.0000),
    ],
)
def test_wilson_matches_published_values(successes: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(low, abs=5e-5)
    assert hi == pytest.approx(high, abs=5e-5)


def test_wilson_by_hand_for_8_of_10() -> None:
    # p = 0.8, z^2 = 3.8415: centre = (0.8 + z^2/20) / (1 + z^2/10),
    # half = z sqrt(0.016 + z^2/400) / (1 + z^2/10).
    z2 = Z95**2
    centre = (0.8 + z2 / 20) / (1 + z2 / 10)
    half = Z95 * sqrt(0.8 * 0.2 / 10 + z2 / 400) / (1 + z2 / 10)
    assert wilson_interval(8, 10) == pytest.approx((centre - half, centre + half), abs=1e-15)


def test_wilson_ends_are_exact_at_the_extremes() -> None:
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(1 - hi)  # symmetric around 1/2


def test_wilson_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
    with pytest.raises(ValueError):
        wilson_interval(-1, 10)


# --- McNemar ------------------------------------------------------------------
def _mcnemar_by_fractions(b: int, c: int) -> Fraction:
    n = b + c
    if n == 0:
        return Fraction(1)
    tail = sum(Fraction(comb(n, i), 2**n) for i in range(min(b, c) + 1))
    return min(Fraction(1), 2 * tail)


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),  # no discordant pairs
        (1, 0, 1.0),  # 2 * 1/2, capped
        (5, 1, 14 / 64),  # 2 * (1 + 6) / 2^6
        (1, 5, 14 / 64),  # symmetric
        (10, 2, 158 / 4096),  # 2 * (1 + 12 + 66) / 2^12
        (0, 5, 2 / 32),
        (3, 3, 1.0),  # 2 * 42/64 > 1, capped
        (7, 0, 2 / 128),
    ],
)
def test_mcnemar_hand_computed(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(("b", "c"), [(20, 30), (30, 20), (12, 25), (100, 130), (1, 1), (0, 12)])
def test_mcnemar_matches_exact_fractions(b: int, c: int) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(float(_mcnemar_by_fractions(b, c)), rel=1e-12)


def test_mcnemar_20_30_known_value() -> None:
    # 2 * P[Bin(50, 1/2) <= 20] = 0.2026388 (e.g. R: binom.test(20, 50)$p.value).
    assert mcnemar_exact_p(20, 30) == pytest.approx(0.2026388, abs=5e-7)


def test_mcnemar_huge_counts_do_not_overflow() -> None:
    assert mcnemar_exact_p(5000, 5000) == 1.0
    assert mcnemar_exact_p(0, 3000) == 0.0  # 2 / 2^3000 underflows to zero, no error


# No comparison with scipy: it is not a test requirement (a large package for
# one cross-check), and a test that skips without it could never fail here.
# The exact-fraction test above checks every digit instead, and the
# hand-computed and R-published cases above pin the convention (two-sided,
# doubled smaller tail, capped at 1).
def test_mcnemar_37_discordant_pairs_exactly() -> None:
    # 2 * P[Bin(37, 1/2) <= 12] = 2 * sum(C(37, i), i = 0..12) / 2^37 = 0.0470310...
    tail = sum(comb(37, i) for i in range(13))
    assert tail == 3_231_947_596
    assert mcnemar_exact_p(12, 25) == pytest.approx(2 * tail / 2**37, rel=1e-12)
    assert mcnemar_exact_p(12, 25) == pytest.approx(0.0470310, abs=5e-8)


# --- percentiles ----------------------------------------------------------------
def test_percentile_interpolates_like_numpy_default() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 4.0
    assert percentile(values, 0.5) == 2.5
    assert percentile(values, 0.25) == 1.75  # h = 3 * 0.25 = 0.75
    assert percentile_interval([3.0, 1.0, 2.0], level=0.5) == (1.5, 2.5)


# --- task-clustered bootstrap --------------------------------------------------
def test_task_bootstrap_two_tasks_by_hand() -> None:
    # Task diffs 0 and 1: a resample of two tasks averages to 0 (p = 1/4),
    # 1/2 (p = 1/2) or 1 (p = 1/4), so the 2.5 % and 97.5 % points are 0 and 1.
    draws = task_bootstrap([(1, 0, 0), (1, 0, 1)], resamples=4000, seed=0)
    assert set(draws) == {0.0, 0.5, 1.0}
    assert draws.count(0.5) / len(draws) == pytest.approx(0.5, abs=0.03)
    assert percentile_interval(draws) == (0.0, 1.0)


def test_task_bootstrap_uses_per_task_rates_of_paired_items() -> None:
    # One task with 4 paired items, A 1/4 and B 3/4: every resample is +0.5.
    assert set(task_bootstrap([(4, 1, 3)], resamples=50, seed=3)) == {0.5}
    # Equal diffs everywhere: a degenerate interval at that diff.
    draws = task_bootstrap([(4, 0, 1), (8, 1, 3), (4, 2, 3)], resamples=200, seed=1)
    assert set(draws) == {0.25}
    assert percentile_interval(draws) == (0.25, 0.25)


def test_task_bootstrap_variance_matches_theory() -> None:
    # The bootstrap variance of a mean of T resampled values is var_pop / T.
    tasks = [(4, a, b) for a, b in [(0, 4), (1, 1), (2, 3), (4, 0), (3, 3), (0, 1), (2, 4), (1, 0)]]
    diffs = [(b - a) / n for n, a, b in tasks]
    mean = sum(diffs) / len(diffs)
    expected_var = sum((d - mean) ** 2 for d in diffs) / len(diffs) / len(diffs)
    draws = task_bootstrap(tasks, resamples=8000, seed=11)
    m = sum(draws) / len(draws)
    var = sum((d - m) ** 2 for d in draws) / (len(draws) - 1)
    assert m == pytest.approx(mean, abs=0.01)
    assert var == pytest.approx(expected_var, rel=0.05)


def test_task_bootstrap_is_seeded_and_reproducible() -> None:
    tasks = [(4, a, b) for a, b in [(0, 4), (1, 1), (2, 3), (4, 0), (3, 3)]]
    assert task_bootstrap(tasks, resamples=300, seed=5) == task_bootstrap(tasks, resamples=300, seed=5)
    assert task_bootstrap(tasks, resamples=300, seed=5) != task_bootstrap(tasks, resamples=300, seed=6)


def test_task_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        task_bootstrap([], resamples=10)
    with pytest.raises(ValueError):
        task_bootstrap([(2, 3, 0)], resamples=10)
    with pytest.raises(ValueError):
        task_bootstrap([(2, 1, 0)], resamples=0)


# --- two-stage bootstrap -------------------------------------------------------
def test_two_stage_captures_run_to_run_variation_by_hand() -> None:
    # A: one run fails everything, one passes everything; B: one run at 1/2.
    # Tasks are identical, so only the run draw matters: B - A is
    # 0.5 - 0 (p 1/4), 0.5 - 0.5 (p 1/2) or 0.5 - 1 (p 1/4).
    a_runs = [[(0, 4)] * 3, [(4, 4)] * 3]
    b_runs = [[(2, 4)] * 3]
    draws = two_stage_bootstrap(a_runs, b_runs, resamples=4000, seed=0)
    assert set(draws) == {-0.5, 0.0, 0.5}
    assert draws.count(0.0) / len(draws) == pytest.approx(0.5, abs=0.03)
    assert percentile_interval(draws) == (-0.5, 0.5)
    # Pooled into one run per side the spread disappears: the run stage is what shows it.
    assert set(two_stage_bootstrap([[(4, 8)] * 3], b_runs, resamples=100, seed=0)) == {0.0}


def test_two_stage_with_one_run_per_side_is_the_task_bootstrap_in_distribution() -> None:
    a = [(0, 4), (1, 4), (4, 4), (2, 4), (3, 4), (0, 4)]
    b = [(4, 4), (1, 4), (0, 4), (3, 4), (3, 4), (1, 4)]
    diffs = [(sb - sa) / 4 for (sa, _), (sb, _) in zip(a, b)]
    mean = sum(diffs) / len(diffs)
    expected_var = sum((d - mean) ** 2 for d in diffs) / len(diffs) ** 2
    draws = two_stage_bootstrap([a], [b], resamples=8000, seed=2)
    m = sum(draws) / len(draws)
    assert m == pytest.approx(mean, abs=0.01)
    assert sum((d - m) ** 2 for d in draws) / (len(draws) - 1) == pytest.approx(expected_var, rel=0.05)


def _two_stage_by_hand(a_runs: list[list[tuple[int, int]]], b_runs: list[list[tuple[int, int]]], seed: int) -> list[float]:
    """The two-stage bootstrap written out: the same draws from the same generator, each task's
    pooled counts summed one run at a time."""
    rng = random.Random(seed)
    t = len(a_runs[0])
    out = []
    for _ in range(300):
        pick_a = rng.choices(range(len(a_runs)), k=len(a_runs))
        pick_b = rng.choices(range(len(b_runs)), k=len(b_runs))
        diff = []
        for task in range(t):
            sa = sum(a_runs[r][task][0] for r in pick_a)
            na = sum(a_runs[r][task][1] for r in pick_a)
            sb = sum(b_runs[r][task][0] for r in pick_b)
            nb = sum(b_runs[r][task][1] for r in pick_b)
            diff.append(sb / nb - sa / na)
        out.append(sum(rng.choices(diff, k=t)) / t)
    return out


@pytest.mark.parametrize("items", [4, 30, 300, 70_000, 2**31])  # pooled counts of 1, 2, 4 and 8 bytes
def test_two_stage_packed_counts_give_the_draws_by_hand(items: int) -> None:
    # two_stage_bootstrap adds each side's drawn runs as packed integers (ledger.benchmarks.stats._Column):
    # exact at every width, so the very same floats as summing task by task.
    rng = random.Random(items)
    a_runs = [[(rng.randint(0, items), items) for _ in range(37)] for _ in range(10)]
    b_runs = [[(rng.randint(0, items), items) for _ in range(37)] for _ in range(7)]
    assert two_stage_bootstrap(a_runs, b_runs, resamples=300, seed=4) == _two_stage_by_hand(a_runs, b_runs, 4)
    assert set(two_stage_bootstrap([[(items, items)] * 3] * 10, [[(0, items)] * 3] * 10, resamples=20)) == {-1.0}


def test_two_stage_is_seeded_and_validates() -> None:
    a_runs = [[(1, 4), (2, 4)], [(3, 4), (0, 4)]]
    b_runs = [[(4, 4), (2, 4)], [(2, 4), (1, 4)]]
    first = two_stage_bootstrap(a_runs, b_runs, resamples=200, seed=9)
    assert first == two_stage_bootstrap(a_runs, b_runs, resamples=200, seed=9)
    assert first != two_stage_bootstrap(a_runs, b_runs, resamples=200, seed=10)
    with pytest.raises(ValueError):
        two_stage_bootstrap(a_runs, [[(1, 4)]], resamples=10)  # different task lists
    with pytest.raises(ValueError):
        two_stage_bootstrap([], b_runs, resamples=10)
