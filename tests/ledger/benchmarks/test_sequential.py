"""ledger.benchmarks.sequential: the constants of Howard et al.'s stitched boundary,
and simulations showing the stopping rule keeps its error rate when the kit looks
after every replicate (where a fixed-sample interval looked at the same way does not)."""
from __future__ import annotations

import random
from math import pi, sqrt

import pytest

from ledger.benchmarks import sequential
from ledger.benchmarks.sequential import ConfidenceSequence, decide, stitched_boundary


def test_constants() -> None:
    assert sequential.zeta(2) == pytest.approx(pi**2 / 6, abs=1e-12)
    assert sequential.zeta(1.4) == pytest.approx(3.1055472779775815, abs=1e-10)
    assert sequential._K1 == pytest.approx(1.435500, abs=1e-6)
    assert sequential._K2 == pytest.approx(1.207107, abs=1e-6)


def test_boundary_by_hand() -> None:
    # v = m = 1, α = 0.025: ℓ = 1.4 log log 2 + log(ζ(1.4) / log(2)^1.4) + log 40
    from math import log

    ell = 1.4 * log(log(2)) + log(3.1055472779775815 / log(2) ** 1.4) + log(40)
    linear = 1.207107 * 2 * ell
    assert stitched_boundary(1, 0.025) == pytest.approx(sqrt(1.4355**2 * ell + linear**2) + linear, rel=1e-6)
    assert stitched_boundary(0.1, 0.025) == stitched_boundary(1, 0.025)  # below m: u(m)
    assert stitched_boundary(100, 0.025) > stitched_boundary(10, 0.025)
    assert stitched_boundary(100, 0.01) > stitched_boundary(100, 0.05)


def test_interval_narrows_and_decides() -> None:
    cs = ConfidenceSequence()
    assert cs.interval().low == -1 and cs.interval().high == 1  # nothing seen: anything
    cs.extend([1] * 30)  # B right, A wrong, thirty times
    first = cs.interval()
    assert first.mean == 1 and first.low > 0 and first.excludes_zero
    assert decide(first, None).decided and "excludes 0" in decide(first, None).reason
    # All ties: the interval narrows around 0; decided only once narrower than --detect.
    ties = ConfidenceSequence().extend([0] * 200).interval()
    assert ties.low < 0 < ties.high
    assert not decide(ties, None).decided
    assert not decide(ties, 0.1).decided and decide(ties, ties.width + 0.01).decided
    with pytest.raises(ValueError):
        ConfidenceSequence().add(2)


def _experiment(rng: random.Random, rates: list[float], effect: float, trials: int, replicates: int) -> list[list[int]]:
    """Per replicate, the paired differences (replicate, task, trial order) of two arms on the same tasks."""
    return [
        [(rng.random() < p + effect) - (rng.random() < p) for p in rates for _ in range(trials)]
        for _ in range(replicates)
    ]


def _naive_interval(xs: list[int]) -> tuple[float, float]:
    n = len(xs)
    mean = sum(xs) / n
    sd = sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean - 1.96 * sd / sqrt(n), mean + 1.96 * sd / sqrt(n)


def test_false_positive_rate_under_optional_stopping() -> None:
    """Identical arms (the same success rate per task, independent outcomes: the noisiest
    paired design). Looking after each of 10 replicates and stopping at the first interval
    that excludes 0, the confidence sequence declares a difference in at most α of the
    experiments; a fixed-sample 95 % interval looked at the same way does so far more often."""
    rng = random.Random(2021)
    experiments, replicates, tasks, trials = 400, 10, 12, 2
    sequence_errors = naive_errors = 0
    for _ in range(experiments):
        rates = [rng.uniform(0.1, 0.9) for _ in range(tasks)]
        cs, seen = ConfidenceSequence(0.05), []
        cs_wrong = naive_wrong = False
        for replicate in _experiment(rng, rates, 0.0, trials, replicates):
            cs.extend(replicate)
            seen += replicate
            cs_wrong = cs_wrong or cs.interval().excludes_zero
            lo, hi = _naive_interval(seen)
            naive_wrong = naive_wrong or lo > 0 or hi < 0
        sequence_errors += cs_wrong
        naive_errors += naive_wrong
    assert sequence_errors / experiments <= 0.05, (sequence_errors, naive_errors)
    assert naive_errors / experiments > 0.10  # peeking at a fixed-sample interval inflates its 5 %


def test_a_real_difference_stops_early() -> None:
    rng = random.Random(7)
    rates = [rng.uniform(0.2, 0.5) for _ in range(20)]
    stopped_at = []
    for _ in range(50):
        cs = ConfidenceSequence()
        for r, replicate in enumerate(_experiment(rng, rates, 0.35, 4, 10), 1):
            if decide(cs.extend(replicate).interval(), None).decided:
                stopped_at.append(r)
                break
    assert len(stopped_at) >= 45 and max(stopped_at) < 10
