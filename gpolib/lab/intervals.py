"""Intervals for the rules of evidence: Student's t quantile, the mean of per-seed values with its
t-interval (n-1 df), paired differences, and a least-squares slope with its t-interval (k-2 df).

No scipy: the t quantile inverts the t CDF, 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2, by bisection, with the
regularised incomplete beta I from its continued fraction; tests check it against printed t tables.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

LEVEL = 0.95
"""two-sided confidence level of every interval"""

# ---------------------------------------------------------------- Student t quantile

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom: 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2 for t >= 0."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t (df >= 1): closed form for df 1 and 2, else bisection on `t_cdf`."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    lo, hi = 0.0, 2.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------- intervals

@dataclass(frozen=True)
class Interval:
    """mean(values) with its two-sided t-interval: mean -/+ t_{(1+level)/2, n-1} * sd / sqrt(n)."""

    values: tuple[float, ...]
    """the per-seed values (differences A_s - B_s for a paired interval)"""
    mean: float
    sd: Optional[float]
    """sample standard deviation (n-1 denominator); None when n < 2"""
    lo: Optional[float]
    """lower end; None when n < 2 (no interval from one value)"""
    hi: Optional[float]
    level: float = LEVEL

    @property
    def n(self) -> int:
        return len(self.values)


def finite(values: Sequence[float], name: str) -> tuple[float, ...]:
    vals = tuple(float(v) for v in values)
    if not vals:
        raise ValueError(f"{name}: no values")
    bad = [i for i, v in enumerate(vals) if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{name}: non-finite values at positions {bad}: {vals}")
    return vals


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """One-sample interval of the mean (t with n-1 df)."""
    vals = finite(values, "mean_interval")
    n, m = len(vals), sum(vals) / len(vals)
    if n < 2:
        return Interval(vals, m, None, None, None, level)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Interval(vals, m, sd, m - half, m + half, level)


def paired(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """Interval of the mean of A_s - B_s, seeds paired by position (same seed, same prompts, same eval samples)."""
    a, b = finite(a, "paired A"), finite(b, "paired B")
    if len(a) != len(b):
        raise ValueError(f"paired: A has {len(a)} seeds, B has {len(b)}; pair them by seed")
    return mean_interval([x - y for x, y in zip(a, b)], level)


@dataclass(frozen=True)
class Fit:
    """Least-squares line y = intercept + slope * x with the slope's t-interval (k-2 df) and R^2."""

    slope: float
    intercept: float
    se: Optional[float]
    """standard error of the slope; None with fewer than 3 points"""
    lo: Optional[float]
    hi: Optional[float]
    r2: float
    k: int
    """number of points (length buckets)"""


def fit_line(x: Sequence[float], y: Sequence[float], level: float = LEVEL) -> Fit:
    """slope = S_xy / S_xx, se = sqrt(SS_res / (k-2) / S_xx), interval slope -/+ t_{k-2} se, R^2 = 1 - SS_res/SS_tot."""
    x, y = finite(x, "fit_line x"), finite(y, "fit_line y")
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"fit_line needs >= 2 points of matching length, got {len(x)} x and {len(y)} y")
    k, xm, ym = len(x), sum(x) / len(x), sum(y) / len(y)
    sxx = sum((u - xm) ** 2 for u in x)
    if sxx == 0:
        raise ValueError("fit_line: all x are equal; no slope")
    slope = sum((u - xm) * (v - ym) for u, v in zip(x, y)) / sxx
    intercept = ym - slope * xm
    ss_res = sum((v - intercept - slope * u) ** 2 for u, v in zip(x, y))
    ss_tot = sum((v - ym) ** 2 for v in y)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    if k < 3:
        return Fit(slope, intercept, None, None, None, r2, k)
    se = math.sqrt(ss_res / (k - 2) / sxx)
    half = t_quantile(0.5 + level / 2, k - 2) * se
    return Fit(slope, intercept, se, slope - half, slope + half, r2, k)
