"""The one metric table: every score the project reports, with its title, direction and kind of interval.

:data:`METRIC_TABLE` holds them all (the results table, the model card, ``results.md`` and the plots take their
titles from it); :data:`METRICS` is the part ``rope-adapter eval`` computes (``--scores``), each with the
interval that summarises one group of per-sample values. ``answer`` and ``soft`` are search scores: the held-out
step reports them, ``eval`` does not compute them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np

from .intervals import Interval, mean_interval, proportion_interval


class Metric(TypedDict):
    """One score of :data:`METRIC_TABLE`."""

    title: str
    short: str  # axis and table label
    higher_is_better: bool
    proportion: bool  # 0/1 per sample: a Wilson interval, three decimals
    interval: Callable[[Sequence[float] | np.ndarray, float], Interval]  # summarises one group of per-sample values
    eval_score: bool  # computed by ``rope-adapter eval`` (--scores)


def _metric(title: str, short: str, *, proportion: bool, eval_score: bool = True) -> Metric:
    return {
        "title": title,
        "short": short,
        "higher_is_better": True,
        "proportion": proportion,
        "interval": proportion_interval if proportion else mean_interval,
        "eval_score": eval_score,
    }


METRIC_TABLE: dict[str, Metric] = {
    "accuracy": _metric("Greedy accuracy (the benchmark's rule)", "accuracy", proportion=True),
    "tf_accuracy": _metric(
        "Teacher-forced accuracy (every answer token is the argmax: greedy decoding writes the answer)",
        "teacher-forced accuracy",
        proportion=True,
    ),
    "answer": _metric(
        "Answer score (teacher-forced accuracy of the whole answer, log-probability breaking ties)",
        "answer score",
        proportion=False,
        eval_score=False,
    ),
    "logprob": _metric(
        "Gold log-probability (teacher-forced, mean per answer token)", "gold log-prob", proportion=False
    ),
    "soft": _metric(
        "Soft teacher-forced accuracy (sigmoid of the smallest answer-token logit margin)",
        "soft accuracy",
        proportion=False,
        eval_score=False,
    ),
}
"""Every score the project reports: ``title``, ``short`` (axis and table label), ``higher_is_better``,
``proportion`` (0/1 per sample), ``interval`` (summarises a group of per-sample values) and ``eval_score``."""

METRICS: dict[str, Metric] = {name: m for name, m in METRIC_TABLE.items() if m["eval_score"]}
"""The scores of a position sweep (``rope-adapter eval --scores``), in :data:`METRIC_TABLE`'s entries."""

PROPORTIONS: tuple[str, ...] = tuple(name for name, m in METRIC_TABLE.items() if m["proportion"])
"""The scores that are proportions (Wilson intervals)."""


def metric_title(name: str, default: str | None = None) -> str:
    """The title of a score in :data:`METRIC_TABLE` (``default``, or the name itself, for any other)."""
    entry = METRIC_TABLE.get(name)
    return entry["title"] if entry else (name if default is None else default)
