"""Stop once decided: an anytime-valid confidence sequence for the mean paired
difference B − A, so the kit may look after every replicate and stop when the
interval excludes 0 (or is narrower than the difference it was asked to
detect) without inflating its error rate. Pure functions, standard library only.

The method (docs/comparisons.md, "Stopping once decided") is the empirical-
Bernstein confidence sequence of Howard, Ramdas, McAuliffe & Sekhon,
"Time-uniform, nonparametric, nonasymptotic confidence sequences", Annals of
Statistics 49(2), 2021 (arXiv:1810.08240):

- each paired item gives X_i = B's outcome − A's outcome ∈ [−1, 1], taken in an
  order fixed before the data (replicate, task, trial);
- X̂_i, the mean of X_1 … X_{i−1} (0 before any), is predictable, and
  V_t = Σ (X_i − X̂_i)² is the variance process; S_t = Σ (X_i − μ_i) is then
  sub-exponential with scale c = b − a = 2 (their Theorem 4), whatever the
  outcomes' distribution, for μ_i the conditional mean of X_i;
- the polynomial stitched boundary u(v) (their Theorem 1, eq. (10); the form
  the authors' confseq package implements as PolyStitchingBound) with η = 2,
  s = 1.4 and m = 1 gives P(∃ t: |S_t| ≥ u(max(V_t, m))) ≤ α, α/2 a side;
- so with probability ≥ 1 − α, for every t at once, the mean of the μ_i lies in
  X̄_t ± u(V_t)/t. After a whole replicate every task has contributed the same
  number of trials, and that mean is the pass^1 difference B − A on these tasks.

Because the guarantee holds for all t simultaneously, it holds at any stopping
time, including "the first replicate after which the interval excludes 0"."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import log, sqrt

ETA = 2.0  # the stitching's epoch growth (the paper's example value)
S = 1.4  # the stitching's exponent (ditto)
V_MIN = 1.0  # the variance process at which the boundary starts; below it, u(V_MIN)
LOW, HIGH = -1.0, 1.0  # a paired difference of two pass/fail outcomes
SCALE = HIGH - LOW


def zeta(s: float) -> float:
    """The Riemann zeta function for s > 1 (Euler–Maclaurin: 1,000 terms and the
    tail's integral and first corrections; exact to about 1e-12 here)."""
    if s <= 1:
        raise ValueError(f"zeta needs s > 1, got {s}")
    n = 1000
    head = sum(k**-s for k in range(1, n))
    return head + n ** (1 - s) / (s - 1) + n**-s / 2 + s * n ** (-s - 1) / 12


_LOG_ZETA_TERM = log(zeta(S) / log(ETA) ** S)
_K1 = (ETA**0.25 + ETA**-0.25) / sqrt(2)
_K2 = (sqrt(ETA) + 1) / 2


def stitched_boundary(v: float, alpha: float, *, scale: float = SCALE, v_min: float = V_MIN) -> float:
    """u(v): P(∃ t: S_t ≥ u(max(V_t, v_min))) ≤ alpha for a sub-gamma process of
    scale `scale` (one side). u(v) = sqrt(k1² v ℓ(v) + (k2 c ℓ(v))²) + k2 c ℓ(v),
    ℓ(v) = s log log(η v / m) + log(ζ(s) / log(η)^s) + log(1 / α)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, not {alpha}")
    v = max(v, v_min)
    ell = S * log(log(ETA * v / v_min)) + _LOG_ZETA_TERM + log(1 / alpha)
    linear = _K2 * scale * ell
    return sqrt(_K1 * _K1 * v * ell + linear * linear) + linear


@dataclass(frozen=True)
class Interval:
    items: int
    mean: float  # X̄_t, the observed mean paired difference
    low: float
    high: float
    level: float = 0.95  # 1 − α

    @property
    def width(self) -> float:
        return self.high - self.low

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


class ConfidenceSequence:
    """The running sums of the empirical-Bernstein confidence sequence; `add`
    each paired difference in the fixed order, read `interval()` at any time."""

    def __init__(self, alpha: float = 0.05) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be between 0 and 1, not {alpha}")
        self.alpha = alpha
        self.items = 0
        self.total = 0.0
        self.variance_process = 0.0

    def add(self, x: float) -> None:
        if not LOW <= x <= HIGH:
            raise ValueError(f"a paired difference is between {LOW} and {HIGH}, not {x}")
        predicted = self.total / self.items if self.items else 0.0  # X̂_i: only what came before
        self.variance_process += (x - predicted) ** 2
        self.total += x
        self.items += 1

    def extend(self, xs: Iterable[float]) -> ConfidenceSequence:
        for x in xs:
            self.add(x)
        return self

    def interval(self) -> Interval:
        if not self.items:
            return Interval(0, 0.0, LOW, HIGH, 1 - self.alpha)
        mean = self.total / self.items
        half = stitched_boundary(self.variance_process, self.alpha / 2) / self.items
        return Interval(self.items, mean, max(LOW, mean - half), min(HIGH, mean + half), 1 - self.alpha)


def expected_width(items: int, variance: float, alpha: float = 0.05) -> float:
    """The interval's width after `items` paired items whose differences have
    within-task variance `variance` (V_t ≈ items × variance): what a plan expects."""
    if items < 1:
        return HIGH - LOW
    return min(HIGH - LOW, 2 * stitched_boundary(items * variance, alpha / 2) / items)


@dataclass(frozen=True)
class Decision:
    decided: bool
    reason: str  # why it is decided, or what it is waiting for
    interval: Interval


def decide(interval: Interval, detect: float | None) -> Decision:
    """The stopping rule: decided once the interval excludes 0, or once it is
    narrower than `detect` (then any difference it could still hold is smaller
    than the one the experiment set out to see)."""
    shown = f"[{100 * interval.low:+.1f}, {100 * interval.high:+.1f}] points"
    if interval.excludes_zero:
        return Decision(True, f"the anytime {interval.level:.0%} interval {shown} excludes 0", interval)
    if detect is not None and interval.width < detect:
        return Decision(
            True, f"the anytime interval {shown} is narrower than {100 * detect:.1f} points", interval
        )
    wait = "excludes 0" + ("" if detect is None else f" or is narrower than {100 * detect:.1f} points")
    return Decision(False, f"the anytime interval {shown} holds 0: going on until it {wait}", interval)
