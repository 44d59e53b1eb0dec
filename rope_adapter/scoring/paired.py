"""Paired differences of per-sample scores between two configurations scored on the same held-out samples.

Per position and for the mean, the interval and verdict come from the project's one rule,
:func:`rope_adapter.scoring.intervals.paired_t_interval` (Student-t over the paired differences), the rule
``rope-adapter eval`` uses too:

- per gold position: mean difference of the per-sample scores, ``se = sd(d) / sqrt(n)``, its 95 % interval;
- mean over positions: each record's mean over its positions, differenced, so samples of one record (which share
  their context) count once: mean, ``se = sd / sqrt(records)`` and its interval; beside it a percentile bootstrap
  interval over records (``bootstrap_low``/``bootstrap_high``, :func:`~rope_adapter.scoring.intervals.bootstrap_interval`),
  a check that does not lean on the t distribution;
- worst position: the difference of the worst position means, with a bootstrap standard error over records
  (seeded, :data:`BOOTSTRAP_SAMPLES` resamples).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from rope_adapter.differences import MeanDifference, PairedDifferences, PositionDifference

from .intervals import Difference, bootstrap_interval, paired_t_interval
from .numbers import fmt, fmt_interval

BOOTSTRAP_SAMPLES = 2000


def _se(values: np.ndarray) -> float | None:
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None


def _interval(diff: np.ndarray) -> tuple[Difference, float | None]:
    """The t interval and verdict of paired differences (one per sample or per record), and their standard error."""
    return paired_t_interval(diff, np.zeros_like(diff)), _se(diff)


def differences_by_position_and_record(
    a: np.ndarray,
    b: np.ndarray,
    positions: np.ndarray,
    record_ids: Sequence[str],
    seed: int = 0,
) -> PairedDifferences:
    """``a - b`` per position, for the mean over positions and for the worst position (see the module docstring)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    positions = np.asarray(positions)
    diff = a - b
    levels = np.unique(positions)
    by_position: dict[str, PositionDifference] = {}
    for p in levels:
        d, se = _interval(diff[positions == p])
        by_position[str(int(p))] = {
            "diff": d.mean,
            "se": se,
            "n": d.n,
            "ci_low": d.low,
            "ci_high": d.high,
            "verdict": d.verdict,
        }
    records = list(dict.fromkeys(record_ids))
    index = {r: i for i, r in enumerate(records)}
    rows = np.array([index[r] for r in record_ids])
    # per record and position (records missing a position are skipped by nanmean)
    grid_a = np.full((len(records), len(levels)), np.nan)
    grid_b = np.full((len(records), len(levels)), np.nan)
    cols = np.searchsorted(levels, positions)
    grid_a[rows, cols] = a
    grid_b[rows, cols] = b
    record_diff = np.nanmean(grid_a, axis=1) - np.nanmean(grid_b, axis=1)
    worst = float(np.nanmin(np.nanmean(grid_a, axis=0)) - np.nanmin(np.nanmean(grid_b, axis=0)))
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(BOOTSTRAP_SAMPLES if len(records) > 1 else 0):
        pick = rng.integers(0, len(records), len(records))
        with np.errstate(all="ignore"), _ignore_nan_warnings():
            boots.append(np.nanmin(np.nanmean(grid_a[pick], axis=0)) - np.nanmin(np.nanmean(grid_b[pick], axis=0)))
    boots_arr = np.array([x for x in boots if np.isfinite(x)])
    d, se = _interval(record_diff)
    boot = bootstrap_interval(record_diff, seed=seed)
    return {
        "by_position": by_position,
        "mean": {
            "diff": d.mean,
            "se": se,
            "n_records": d.n,
            "ci_low": d.low,
            "ci_high": d.high,
            "verdict": d.verdict,
            "bootstrap_low": boot.low,
            "bootstrap_high": boot.high,
        },
        "worst": {"diff": worst, "se_bootstrap": float(boots_arr.std(ddof=1)) if len(boots_arr) > 1 else None},
    }


class _ignore_nan_warnings:
    def __enter__(self) -> None:
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


def describe_difference(name: str, d: PositionDifference | MeanDifference) -> str:
    """``"found - base: +0.052 [+0.010, +0.094] (2.5 SE)"`` (``± se`` when no interval was stored)."""
    se = d.get("se")
    if se is None or se == 0:
        return f"{name}: {fmt(d['diff'], 4, sign=True)}"
    if d.get("ci_low") is not None:
        text = fmt_interval(d["diff"], d["ci_low"], d["ci_high"], 4, sign=True)
    else:
        text = f"{fmt(d['diff'], 4, sign=True)} ± {fmt(se, 4)}"
    return f"{name}: {text} ({d['diff'] / se:+.1f} SE)"
