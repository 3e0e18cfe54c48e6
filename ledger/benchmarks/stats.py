"""The statistics behind `compare`: pure functions on counts, standard library
only (no Django, numpy or scipy), so they can be checked by hand.

- `wilson_interval`: Wilson score interval for one proportion; `wilson_of_mean`
  for a mean of n values in [0, 1], the floor `at_least_wilson` puts under an
  interval over few tasks (or tasks that all scored alike).
- `mcnemar_exact_p`: exact two-sided McNemar test on the discordant pairs.
- `task_bootstrap` / `two_stage_bootstrap`: resampled differences in pass^1,
  turned into an interval by `percentile_interval`.

pass^1 here is τ²'s: the mean over tasks of each task's success rate. The
bootstrap statistic is the same quantity, so its interval is an interval for
exactly the figure `compare` prints as the difference.
"""
from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import floor, sqrt
from operator import sub, truediv
from statistics import NormalDist
from typing import Literal

from ledger.benchmarks.metrics import pass_hat_k

# The 97.5 % quantile of the standard normal, to the precision of a double.
Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, *, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for `successes` out of `n` (95 % by default).

    Clamped to [0, 1]; the low end is exactly 0 with no successes and the high
    end exactly 1 with all successes (the formula gives that mathematically,
    rounding might not). With n = 0 nothing is known: (0, 1)."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for discordant counts b and c.

    Under the null each discordant pair goes either way with probability 1/2,
    so X ~ Bin(b + c, 1/2) and p = min(1, 2 P[X <= min(b, c)]); p = 1 when
    there are no discordant pairs. Computed with integers, then one division,
    so it is exact up to the final rounding."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got {b}, {c}")
    n = b + c
    if n == 0:
        return 1.0
    tail, term = 0, 1  # term = comb(n, i), updated in place: O(min(b, c)) steps
    for i in range(min(b, c) + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return min(1.0, 2 * tail / 2**n)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) of already sorted values, interpolating
    linearly between order statistics (numpy's default, "type 7")."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    h = (len(sorted_values) - 1) * q
    lo = floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def percentile_interval(values: Sequence[float], *, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval: the (1-level)/2 and (1+level)/2 quantiles."""
    ordered = sorted(values)
    tail = (1 - level) / 2
    return (percentile(ordered, tail), percentile(ordered, 1 - tail))


# Past this a 95 % interval's endpoints move by well under a thousandth, while the
# time grows linearly (100,000 resamples of 50 tasks take seconds; 10^11 would take days).
MAX_RESAMPLES = 100_000


def _check_resamples(resamples: int) -> None:
    if not 1 <= resamples <= MAX_RESAMPLES:
        raise ValueError(f"resamples must be between 1 and {MAX_RESAMPLES:,}, got {resamples}")


def task_bootstrap(
    tasks: Sequence[tuple[int, int, int]], *, resamples: int = 2000, seed: int = 0
) -> list[float]:
    """Task-clustered paired bootstrap of the difference in pass^1 (B - A).

    `tasks` holds one (paired_items, a_successes, b_successes) per task: the
    items of that task both sides have. Each resample draws len(tasks) tasks
    with replacement; a drawn task brings all its paired items (both sides'
    outcomes together, so the pairing is kept), and the statistic is the mean
    over the drawn tasks of (b_successes - a_successes) / paired_items. Tasks,
    not items, are the unit because trials of one task are correlated.

    Returns the `resamples` statistics, in draw order; reproducible for the
    same input, seed and Python version (`random.Random(seed)`)."""
    _check_resamples(resamples)
    if not tasks:
        raise ValueError("bootstrap needs at least one task")
    for n, a, b in tasks:
        if n < 1 or not (0 <= a <= n and 0 <= b <= n):
            raise ValueError(f"bad task counts (items={n}, a={a}, b={b})")
    diffs = [(b - a) / n for n, a, b in tasks]
    rng = random.Random(seed)
    t = len(diffs)
    return [sum(rng.choices(diffs, k=t)) / t for _ in range(resamples)]


def two_stage_bootstrap(
    a_runs: Sequence[Sequence[tuple[int, int]]],
    b_runs: Sequence[Sequence[tuple[int, int]]],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> list[float]:
    """Two-stage bootstrap of the difference in pooled pass^1 (B - A) between
    two groups of runs.

    Every run lists, for the same tasks in the same order, (successes, items)
    on its shared items. Each resample:
      1. draws len(a_runs) runs with replacement from A and, independently,
         len(b_runs) runs from B (between-run variation: seeds, sampling);
      2. draws as many task indices with replacement as there are tasks, the
         same indices for both sides (task clustering, pairing kept);
      3. for each drawn task pools each side's drawn runs (successes over
         items, a run drawn twice counting twice), and averages B - A over
         the drawn tasks.
    Returns the `resamples` statistics; reproducible for the same input, seed
    and Python version."""
    _check_resamples(resamples)
    if not a_runs or not b_runs:
        raise ValueError("two-stage bootstrap needs at least one run per side")
    t = len(a_runs[0])
    if t == 0:
        raise ValueError("bootstrap needs at least one task")
    for run in (*a_runs, *b_runs):
        if len(run) != t:
            raise ValueError("every run must list the same tasks")
        for s, n in run:
            if n < 1 or not 0 <= s <= n:
                raise ValueError(f"bad task counts (successes={s}, items={n})")
    # The largest pooled count: every drawn run the one with the most items.
    column = _Column.holding(max(n for run in (*a_runs, *b_runs) for _, n in run) * max(len(a_runs), len(b_runs)))
    a_succ = column.packed([s for s, _ in run] for run in a_runs)
    a_items = column.packed([n for _, n in run] for run in a_runs)
    b_succ = column.packed([s for s, _ in run] for run in b_runs)
    b_items = column.packed([n for _, n in run] for run in b_runs)
    rng = random.Random(seed)
    out: list[float] = []
    for _ in range(resamples):
        pick_a = rng.choices(range(len(a_runs)), k=len(a_runs))
        pick_b = rng.choices(range(len(b_runs)), k=len(b_runs))
        # Per-task pooled counts over the drawn runs (integers: exact, whatever the order), and
        # B - A per task; a 10-run group compare is 2,000 of these over every task.
        sa, na = column.pooled(a_succ, pick_a, t), column.pooled(a_items, pick_a, t)
        sb, nb = column.pooled(b_succ, pick_b, t), column.pooled(b_items, pick_b, t)
        diff = list(map(sub, map(truediv, sb, nb), map(truediv, sa, na)))
        out.append(sum(rng.choices(diff, k=t)) / t)
    return out


_TypeCode = Literal["B", "H", "I", "Q"]
_TYPE_CODES: tuple[_TypeCode, ...] = ("B", "H", "I", "Q")


@dataclass(frozen=True)
class _Column:
    """Each run's per-task counts packed into one integer, a fixed number of bits a task, so
    that pooling the drawn runs is a few additions of big integers and one conversion back, in C,
    instead of summing every task's column in Python (three quarters of two_stage_bootstrap's
    time, docs/performance.md). Exact: no column's sum may reach its width's limit, so the
    width is the smallest that holds the largest pooled count (`holding`)."""

    code: _TypeCode  # an array/memoryview type code: B, H, I or Q (1, 2, 4, 8 bytes)
    size: int  # its bytes a task

    @classmethod
    def holding(cls, largest: int) -> _Column:
        for code in _TYPE_CODES:
            size = array(code).itemsize
            if largest < 256**size:
                return cls(code, size)
        raise ValueError(f"task counts too large to pool ({largest:,})")

    def packed(self, runs: Iterable[list[int]]) -> list[int]:
        """Each run's counts (non-negative) as one integer, task 0 in the lowest bits."""
        return [int.from_bytes(array(self.code, counts).tobytes(), sys.byteorder) for counts in runs]

    def pooled(self, packed: list[int], picks: list[int], tasks: int) -> memoryview[int]:
        """The per-task sums of the picked runs' counts (a run picked twice counts twice)."""
        total = sum(map(packed.__getitem__, picks))
        return memoryview(total.to_bytes(self.size * tasks, sys.byteorder)).cast(self.code)


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of a sorted list (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


SMALL_TASKS = 30  # below this many tasks an interval over tasks is never narrower than Wilson's


def wilson_of_mean(mean: float, n: int, *, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a mean of n values in [0, 1]: such a mean varies at
    most as a proportion of n trials does, so this never understates, and it has width
    for any n (no [1.000, 1.000] after two tasks). (0, 1) for n < 1."""
    if n < 1:
        return (0.0, 1.0)
    z2 = z * z
    denom = 1 + z2 / n
    centre = (mean + z2 / (2 * n)) / denom
    half = z * sqrt(max(0.0, mean * (1 - mean)) / n + z2 / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def at_least_wilson(mean: float, lo: float, hi: float, n: int, *, z: float = Z95) -> tuple[float, float]:
    """An interval over n tasks, widened to Wilson's (`wilson_of_mean`) when n < SMALL_TASKS or it
    has no width: a normal or bootstrap interval over few tasks, or over tasks that all scored
    alike (two tasks at 0.5 give [0.5, 0.5]), understates the uncertainty or shows none."""
    if n < SMALL_TASKS or hi - lo <= 0:
        w_lo, w_hi = wilson_of_mean(mean, n, z=z)
        return (min(lo, w_lo), max(hi, w_hi))
    return (lo, hi)


def pass_hat_k_intervals(
    per_task: Sequence[Sequence[bool]],
    *,
    max_k: int,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[tuple[float, float]]:
    """Percentile bootstrap intervals of pass^1..max_k, resampling tasks (the
    unit τ² averages over), so tasks with correlated trials count once; at
    least Wilson's over as many tasks (`at_least_wilson`)."""
    if not per_task or max_k < 1:
        return []
    values = [tuple(pass_hat_k(len(t), sum(t), k) for k in range(1, max_k + 1)) for t in per_task]
    rng = random.Random(seed)
    n = len(values)
    draws: list[list[float]] = [[] for _ in range(max_k)]
    for _ in range(resamples):
        picks = rng.choices(values, k=n)  # the drawn tasks' pass^1..max_k
        # Each k's sum over the drawn tasks, zip() and sum() in C: the run and
        # compare pages pay this per view, a pooled 10-run group with max_k = 40.
        for k_draws, total in zip(draws, map(sum, zip(*picks))):
            k_draws.append(total / n)
    tail = (1 - confidence) / 2
    z = NormalDist().inv_cdf(1 - tail)
    out = []
    for column, k_draws in zip(zip(*values), draws):  # column: every task's pass^k
        k_draws.sort()
        out.append(at_least_wilson(sum(column) / n, _percentile(k_draws, tail), _percentile(k_draws, 1 - tail), n, z=z))
    return out


def sample_sd(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n − 1 in the denominator); None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def bootstrap_p(draws: Sequence[float]) -> float:
    """Two-sided bootstrap p-value for "the difference is 0", as the original
    Marina computed it: min(1, 2 (min(#draws <= 0, #draws >= 0) + 1) / (R + 1))."""
    if not draws:
        raise ValueError("bootstrap p of no draws")
    low = sum(1 for d in draws if d <= 0)
    high = sum(1 for d in draws if d >= 0)
    return min(1.0, 2 * (min(low, high) + 1) / (len(draws) + 1))
