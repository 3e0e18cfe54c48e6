"""Power for the paired design the τ² kit runs: how many trials per task a
difference in pass^1 needs before a run, and the smallest difference a
comparison could have detected after it. Pure functions on numbers, standard
library only (statistics.NormalDist for the normal quantiles); the ledger's
history is read by ledger.benchmarks.noise, the kit's plan by repro.power.

The model (docs/comparisons.md, "Power"): B − A in pass^1 is the mean over T
tasks of each task's mean paired difference D = B − A over its n trials, the
two arms run on the same tasks with the same trial seeds. With σ² the variance
of one paired difference within a task (averaged over tasks),

    Var(Δ̂) = σ² / (T · n)

and a two-sided level-α test has power 1 − β against a true difference Δ when

    Δ = (z_{1−α/2} + z_{1−β}) · sqrt(σ² / (T · n)),

so n = (z_{1−α/2} + z_{1−β})² · σ² / (T · Δ²) trials per task (Chow, Shao &
Wang, "Sample Size Calculations in Clinical Research", 2nd ed., §3.1 / §4 for
paired differences; Lachin 1981, Controlled Clinical Trials 2:93-113)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, sqrt
from statistics import NormalDist

ALPHA = 0.05
POWER = 0.80
# Without history: every task at 50 % in both arms and the arms independent within a task, so
# one paired difference has variance 0.25 + 0.25 = 0.5, the largest it can have unless the arms
# are anti-correlated (the same seeds make them, if anything, positively correlated).
PRIOR_VARIANCE = 0.5
PRIOR_NOTE = (
    "no comparable runs in the ledger: a conservative prior, every task at 50 % in both arms and the arms "
    "independent within a task (variance 0.5 per paired trial)"
)
# A comparison that could only have seen a difference larger than this says "too few runs to say":
# single τ² runs of one model differ by 5.5-10.7 points from noise alone (sierra-research/tau2-bench#540).
TOO_FEW_ABOVE = 0.10

_NORMAL = NormalDist()


def check_levels(alpha: float, power: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, not {alpha}")
    if not 0 < power < 1:
        raise ValueError(f"power must be between 0 and 1, not {power}")


def z_total(alpha: float = ALPHA, power: float = POWER) -> float:
    """z_{1−α/2} + z_{power}: 1.960 + 0.842 = 2.802 at α 0.05 and 80 % power."""
    check_levels(alpha, power)
    return _NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(power)


def trials_needed(detect: float, variance: float, tasks: int, *, alpha: float = ALPHA, power: float = POWER) -> int:
    """Trials per task (per arm, paired) for power `power` against a pass^1
    difference `detect` at level `alpha`, over `tasks` tasks; at least 1."""
    if not 0 < detect <= 1:
        raise ValueError(f"the difference to detect must be a share of tasks between 0 and 1, not {detect}")
    if tasks < 1:
        raise ValueError("a power plan needs at least one task")
    if variance < 0:
        raise ValueError(f"a variance is not negative, got {variance}")
    # A hair of slack so a float just above an integer (9.000000000000002) is not one trial more.
    return max(1, ceil(z_total(alpha, power) ** 2 * variance / (tasks * detect * detect) - 1e-9))


def detectable(variance: float, tasks: int, trials: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest pass^1 difference `trials` paired trials per task over `tasks`
    tasks detect with power `power` at level `alpha`."""
    if tasks < 1 or trials < 1:
        raise ValueError("need at least one task and one trial")
    return z_total(alpha, power) * sqrt(variance / (tasks * trials))


def smallest_detectable(standard_error: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """After a comparison: (z_{1−α/2} + z_{power}) × the standard error of its difference."""
    return z_total(alpha, power) * standard_error


def paired_variance(tasks: Sequence[Sequence[int]]) -> tuple[float, int] | None:
    """The within-task variance of a paired difference D (B − A, each −1, 0 or 1),
    averaged over the tasks with at least two paired trials: per task the sample
    variance (n − 1) of its D values. With p_A, p_B and the discordance δ of a task,
    E[D²] = δ and Var D = δ − (p_B − p_A)². Returns (variance, tasks used), None
    when no task has two trials."""
    per_task = []
    for diffs in tasks:
        n = len(diffs)
        if n < 2:
            continue
        mean = sum(diffs) / n
        per_task.append(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if not per_task:
        return None
    return sum(per_task) / len(per_task), len(per_task)


def outcome_variance(tasks: Sequence[tuple[int, int]]) -> tuple[float, int] | None:
    """The within-task variance of one arm's outcome, averaged over the tasks with
    at least two trials: per task c(n − c) / (n(n − 1)) for c successes of n (the
    unbiased estimate of p(1 − p)). Returns (variance, tasks used), None when no
    task has two trials."""
    per_task = [c * (n - c) / (n * (n - 1)) for c, n in tasks if n >= 2]
    if not per_task:
        return None
    return sum(per_task) / len(per_task), len(per_task)


@dataclass(frozen=True)
class Verdict:
    """What a comparison says about its difference, in words."""

    decided: bool  # the 95 % interval excludes 0
    smallest_detectable: float | None  # None: cannot be estimated (fewer than two tasks, no spread)
    text: str


def verdict(diff_ci: tuple[float, float], standard_error: float | None, tasks: int, *,
            alpha: float = ALPHA, power: float = POWER, too_few_above: float = TOO_FEW_ABOVE) -> Verdict:  # fmt: skip
    """"a difference" when the interval excludes 0; else "no difference larger than X"
    (X the smallest detectable difference) or "too few runs to say"."""
    mde = None
    if standard_error is not None and standard_error > 0 and tasks >= 2:
        mde = smallest_detectable(standard_error, alpha=alpha, power=power)
    lo, hi = diff_ci
    level = f"{power:.0%} power"
    if lo > 0 or hi < 0:
        shown = "" if mde is None else f" (these runs detect {_points(mde)} at {level})"
        return Verdict(True, mde, f"a difference: the 95 % interval excludes 0{shown}")
    if mde is None:
        why = "fewer than two shared tasks" if tasks < 2 else "no spread between tasks to measure the noise by"
        return Verdict(False, None, f"too few runs to say ({why})")
    if mde > too_few_above:
        return Verdict(
            False, mde,
            f"too few runs to say: only a difference larger than {_points(mde)} would have been seen at {level}",
        )  # fmt: skip
    return Verdict(False, mde, f"no difference larger than {_points(mde)} (the smallest these runs detect at {level})")


def _points(x: float) -> str:
    return f"{100 * x:.1f} points"


@dataclass(frozen=True)
class Distinction:
    """Two independent estimates, each with its 95 % normal interval: is their difference told apart?"""

    diff: float  # second − first
    standard_error: float
    distinguishable: bool  # |diff| > z_{1−α/2} × SE
    smallest_detectable: float  # (z_{1−α/2} + z_power) × SE


def standard_error_from_interval(value: float, low: float, high: float, z: float = 1.959963984540054) -> float:
    """The SE behind a value ± z·SE interval clamped to [0, 1]: the wider side was not clamped
    (unless both were, when this errs small)."""
    return max(value - low, high - value) / z


def distinguish(first: tuple[float, float, float], second: tuple[float, float, float], *,
                alpha: float = ALPHA, power: float = POWER) -> Distinction:  # fmt: skip
    """Two (value, low, high) estimates taken as independent: SE = sqrt(SE₁² + SE₂²). Points of
    one benchmark share tasks, which correlates them positively, so this errs towards "not
    distinguishable"; a paired `compare` of their runs is the sharper test."""
    se = sqrt(sum(standard_error_from_interval(*point) ** 2 for point in (first, second)))
    diff = second[0] - first[0]
    z = _NORMAL.inv_cdf(1 - alpha / 2)
    return Distinction(diff, se, abs(diff) > z * se, z_total(alpha, power) * se)
