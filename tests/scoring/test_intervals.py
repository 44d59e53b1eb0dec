"""Confidence intervals (rope_adapter.scoring.intervals): Student-t quantiles against printed tables, mean and
Wilson intervals bracket their means, the bootstrap agrees with t on normal data and respects bounds on skewed data,
paired-t verdicts.
"""

from __future__ import annotations

import numpy as np
import pytest

from rope_adapter.scoring.intervals import (
    Interval,
    bootstrap_interval,
    mean_interval,
    paired_t_interval,
    proportion_interval,
    t_quantile,
)


def test_t_quantile_matches_tables():
    for df, expected in [(1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423), (120, 1.9799)]:
        assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(0.025, 7) == pytest.approx(-t_quantile(0.975, 7))


def test_intervals_bracket_their_means():
    rng = np.random.default_rng(1)
    for n in [2, 3, 10, 50]:
        values = rng.normal(size=n)
        interval = mean_interval(values)
        assert interval.brackets(interval.mean) and interval.mean == pytest.approx(values.mean())
        bits = rng.integers(0, 2, size=n)
        wilson = proportion_interval(bits)
        assert wilson.brackets(wilson.mean) and 0.0 <= wilson.low <= wilson.high <= 1.0
    assert proportion_interval([1, 1, 1]).high == 1.0 and proportion_interval([0, 0]).low == 0.0
    assert mean_interval([3.0]).low is None  # one value: no interval


def test_bootstrap_interval_matches_t_on_normal_data_and_respects_bounds_on_skewed_data():
    rng = np.random.default_rng(3)
    values = rng.normal(0.3, 1.0, size=400)
    boot, t = bootstrap_interval(values), mean_interval(values)
    assert boot.mean == pytest.approx(t.mean)
    assert boot.low == pytest.approx(t.low, abs=0.02) and boot.high == pytest.approx(t.high, abs=0.02)
    assert bootstrap_interval(values, seed=5) == bootstrap_interval(values, seed=5)  # seeded: reproducible
    # 18 records unchanged, 2 gained one answer: no resample mean is below 0, while the t interval crosses 0
    skewed = [0.0] * 18 + [1.0, 1.0]
    assert mean_interval(skewed).low < 0.0 <= bootstrap_interval(skewed).low
    assert bootstrap_interval([2.0, 2.0, 2.0]) == Interval(2.0, 2.0, 2.0, 3)
    assert bootstrap_interval([1.0]).low is None
    with pytest.raises(ValueError, match="no values"):
        bootstrap_interval([])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_interval([1.0, 2.0], confidence=1.5)


def test_paired_t_interval_verdicts():
    assert paired_t_interval([1, 2, 3], [1, 2, 3]).verdict == "identical"
    assert paired_t_interval([1.0, 1.1, 0.9, 1.05], [0, 0, 0, 0]).verdict == "better"
    assert paired_t_interval([1.0, 1.1, 0.9, 1.05], [0, 0, 0, 0], higher_is_better=False).verdict == "worse"
    assert paired_t_interval([0.1, -0.1, 0.05, -0.02], [0, 0, 0, 0]).verdict == "within noise"
