"""Confidence intervals for evaluation tables, with the standard library only (no scipy).

- :func:`mean_interval`: Student-t interval of a mean (gold log-probabilities, per-window log-likelihoods).
- :func:`proportion_interval`: Wilson score interval of a proportion (greedy accuracy); it always contains the
  observed proportion and stays inside [0, 1], also at 0 % and 100 %.
- :func:`paired_t_interval`: the t interval of the per-sample differences between two variants scored on the
  same samples, and a verdict: "identical", "within noise" (the interval includes 0), "better" or "worse".
- :func:`bootstrap_interval`: a seeded percentile bootstrap interval of a mean (no normality assumption), the
  check beside the t interval when the values are a few dozen per-record differences of 0/1 accuracies.

The t quantile is computed exactly from the regularised incomplete beta function (continued fraction), so any
confidence level and any number of samples work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypedDict

import numpy as np

CONFIDENCE = 0.95


class IntervalEntry(TypedDict):
    """An :class:`Interval` as the JSON files hold it (``Interval.to_dict``)."""

    mean: float
    ci_low: float | None
    ci_high: float | None
    n: int


class DifferenceEntry(TypedDict):
    """A :class:`Difference` as the JSON files hold it (``Difference.to_dict``)."""

    diff: float
    ci_low: float | None
    ci_high: float | None
    n: int
    verdict: str


@dataclass(frozen=True)
class Interval:
    """A mean (or proportion) with its confidence interval; ``low``/``high`` are None below two samples."""

    mean: float
    low: float | None
    high: float | None
    n: int

    def to_dict(self) -> IntervalEntry:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "n": self.n}

    def brackets(self, value: float) -> bool:
        """True when ``low <= value <= high`` (False without an interval)."""
        return self.low is not None and self.high is not None and self.low <= value <= self.high


@dataclass(frozen=True)
class Difference:
    """Mean paired difference ``variant - reference`` with its interval and a verdict."""

    mean: float
    low: float | None
    high: float | None
    n: int
    verdict: str

    def to_dict(self) -> DifferenceEntry:
        return {"diff": self.mean, "ci_low": self.low, "ci_high": self.high, "n": self.n, "verdict": self.verdict}


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t (bisection on :func:`t_cdf`, to 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


def mean_interval(values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """Mean and Student-t confidence interval (no interval for fewer than two values)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to summarise")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, None, None, int(x.size))
    half = t_quantile((1.0 + confidence) / 2.0, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(mean, mean - half, mean + half, int(x.size))


def proportion_interval(values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """Proportion of true values and its Wilson score interval."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to summarise")
    n = int(x.size)
    p = float(x.mean())
    z = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n)) / denom
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return Interval(p, min(low, p), max(high, p), n)  # guard the last ulp: the interval contains p


BOOTSTRAP_RESAMPLES = 10_000


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean and percentile bootstrap interval: the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
    quantiles of the means of ``resamples`` resamples drawn with replacement (seeded, so reproducible).

    No interval for fewer than two values; a constant sample gives the degenerate interval at its mean.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to summarise")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if resamples < 2:
        raise ValueError(f"resamples must be >= 2, got {resamples}")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, None, None, int(x.size))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    low, high = np.quantile(means, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return Interval(mean, float(low), float(high), int(x.size))


def difference_from_se(
    diff: float, se: float | None, n: int | None, *, higher_is_better: bool = True, confidence: float = CONFIDENCE
) -> Difference:
    """A mean difference with its standard error as a Student-t interval (df = n - 1) and a verdict: the one
    rule every paired comparison in the project uses.

    The verdict is "identical" when the difference and its standard error are exactly 0, "within noise" when the
    interval includes 0, "better"/"worse" when it excludes 0 (by ``higher_is_better``), and "n/a" without a
    standard error (fewer than two samples).
    """
    if se is None or n is None or n < 2 or not math.isfinite(se):
        return Difference(float(diff), None, None, int(n or 0), "n/a")
    if se == 0 and diff == 0:
        return Difference(0.0, 0.0, 0.0, int(n), "identical")
    half = t_quantile((1.0 + confidence) / 2.0, n - 1) * se
    low, high = diff - half, diff + half
    if low <= 0.0 <= high:
        verdict = "within noise"
    else:
        verdict = "better" if (low > 0.0) == higher_is_better else "worse"
    return Difference(float(diff), low, high, int(n), verdict)


def paired_t_interval(
    values: Sequence[float] | np.ndarray,
    reference: Sequence[float] | np.ndarray,
    *,
    higher_is_better: bool = True,
    confidence: float = CONFIDENCE,
) -> Difference:
    """``values - reference`` per sample, summarised by :func:`difference_from_se` (mean, ``sd / sqrt(n)``)."""
    a, b = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same samples, got {a.shape} and {b.shape}")
    diff = a - b
    if diff.size == 0:
        raise ValueError("no values to summarise")
    if not diff.any():
        return Difference(0.0, 0.0, 0.0, int(diff.size), "identical")
    se = float(diff.std(ddof=1)) / math.sqrt(diff.size) if diff.size > 1 else None
    return difference_from_se(
        float(diff.mean()), se, int(diff.size), higher_is_better=higher_is_better, confidence=confidence
    )
