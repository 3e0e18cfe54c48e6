"""ledger.benchmarks.power: the plan's formula against hand-computed values and
a simulation of the paired design it assumes, the after-the-fact wording."""
from __future__ import annotations

import random
from math import sqrt

import pytest

from ledger.benchmarks import power


def test_z_total_is_the_textbook_sum() -> None:
    # z_0.975 = 1.959964, z_0.80 = 0.841621 (any normal table).
    assert power.z_total() == pytest.approx(1.959964 + 0.841621, abs=1e-6)
    assert power.z_total(0.01, 0.9) == pytest.approx(2.575829 + 1.281552, abs=1e-6)
    with pytest.raises(ValueError, match="alpha"):
        power.z_total(1.5, 0.8)
    with pytest.raises(ValueError, match="power"):
        power.z_total(0.05, 0)


def test_trials_needed_by_hand() -> None:
    # (1.959964 + 0.841621)^2 * 0.5 / (50 * 0.05^2) = 7.84888 * 0.5 / 0.125 = 31.4 -> 32
    assert power.trials_needed(0.05, 0.5, 50) == 32
    # A quarter of the variance, a quarter of the trials (rounded up): 7.85 -> 8
    assert power.trials_needed(0.05, 0.125, 50) == 8
    # Twice the difference, a quarter of the trials.
    assert power.trials_needed(0.10, 0.5, 50) == 8
    # Never fewer than one.
    assert power.trials_needed(0.9, 0.01, 100) == 1
    # What the plan's trials detect is at most what was asked.
    n = power.trials_needed(0.03, 0.2, 114)
    assert power.detectable(0.2, 114, n) <= 0.03 < power.detectable(0.2, 114, n - 1)
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="difference to detect"):
            power.trials_needed(bad, 0.5, 50)


def test_planned_trials_have_the_promised_power_in_a_simulation() -> None:
    """The paired design the kit runs: 20 tasks with their own success rates, both arms on the
    same tasks; B is 0.2 better on every task. At the planned trials per task a two-sided
    test at α 0.05 (difference over its estimated standard error) rejects about 80 % of the time."""
    rng = random.Random(46)
    tasks, detect = 20, 0.2
    rates = [rng.uniform(0.2, 0.6) for _ in range(tasks)]
    variance = sum(p * (1 - p) + (p + detect) * (1 - p - detect) for p in rates) / tasks  # arms independent
    n = power.trials_needed(detect, variance, tasks)
    rejected, experiments = 0, 1500
    for _ in range(experiments):
        diffs = [[(rng.random() < p + detect) - (rng.random() < p) for _ in range(n)] for p in rates]
        estimate = sum(sum(d) / n for d in diffs) / tasks
        var, _ = power.paired_variance(diffs) or (0.0, 0)
        se = sqrt(var / (tasks * n))
        rejected += abs(estimate) > 1.959964 * se
    assert 0.74 <= rejected / experiments <= 0.92, (n, rejected / experiments)


def test_variance_estimates() -> None:
    # Task 1: D = 1, 0, 0, -1 -> mean 0, variance 2/3; task 2: 0, 0 -> 0; task 3: one trial, left out.
    assert power.paired_variance([[1, 0, 0, -1], [0, 0], [1]]) == (pytest.approx(1 / 3), 2)
    assert power.paired_variance([[1], [0]]) is None
    # c(n - c) / (n(n - 1)): 2 of 4 -> 4/12; 4 of 4 -> 0.
    assert power.outcome_variance([(2, 4), (4, 4), (1, 1)]) == (pytest.approx(1 / 6), 2)
    assert power.outcome_variance([(1, 1)]) is None


def test_smallest_detectable_and_the_verdict() -> None:
    assert power.smallest_detectable(0.01) == pytest.approx(0.028016, abs=1e-6)
    # Decided: the interval excludes 0.
    v = power.verdict((0.02, 0.09), 0.018, 50)
    assert v.decided and v.text.startswith("a difference: the 95 % interval excludes 0")
    # Not decided, small enough noise: "no difference larger than X".
    v = power.verdict((-0.02, 0.03), 0.0125, 50)
    assert not v.decided and v.smallest_detectable == pytest.approx(0.035, abs=1e-4)
    assert v.text == "no difference larger than 3.5 points (the smallest these runs detect at 80% power)"
    # Not decided, too much noise to say anything.
    v = power.verdict((-0.2, 0.2), 0.1, 50)
    assert v.text == "too few runs to say: only a difference larger than 28.0 points would have been seen at 80% power"
    # Nothing to measure the noise with.
    assert power.verdict((0.0, 0.0), 0.0, 50).text == "too few runs to say (no spread between tasks to measure the noise by)"
    assert power.verdict((-1.0, 1.0), None, 1).text == "too few runs to say (fewer than two shared tasks)"


def test_two_points_told_apart_by_hand() -> None:
    # SE of each: 0.1 / 1.96 = 0.05102; of the difference sqrt(2) × that = 0.07215.
    told = power.distinguish((0.5, 0.4, 0.6), (0.7, 0.6, 0.8))
    assert told.standard_error == pytest.approx(0.1 / 1.959964 * sqrt(2), rel=1e-5)
    assert told.diff == pytest.approx(0.2) and told.distinguishable  # 0.2 > 1.96 × 0.0722 = 0.141
    assert told.smallest_detectable == pytest.approx(2.801585 * told.standard_error, rel=1e-5)
    assert not power.distinguish((0.5, 0.4, 0.6), (0.6, 0.5, 0.7)).distinguishable  # 0.1 < 0.141
    # An interval clamped at 1: the unclamped side carries the SE.
    assert power.standard_error_from_interval(0.98, 0.9, 1.0) == pytest.approx(0.08 / 1.959964, rel=1e-5)
