"""A paired difference between two configurations scored on the same samples, as the JSON files hold it: one typed
definition that :func:`rope_adapter.scoring.paired.differences_by_position_and_record` writes and every reader (the
search report's Markdown and results record, the adapter's provenance, the model card) reads. It lives in the core,
below its writer, because the adapter's provenance (:mod:`rope_adapter.provenance`) holds it too."""

from __future__ import annotations

from typing import TypedDict

__all__ = ["MeanDifference", "PairedDifferences", "PositionDifference", "WorstDifference"]


class _Interval(TypedDict, total=False):
    """The t interval and verdict: always written; search reports written before they were stored lack them."""

    ci_low: float | None
    ci_high: float | None
    verdict: str


class _PositionDifferenceRequired(TypedDict):
    diff: float
    se: float | None  # sd(d) / sqrt(n); None for one sample
    n: int


class PositionDifference(_PositionDifferenceRequired, _Interval, total=False):
    """The paired difference at one gold position: over its samples."""


class _MeanDifferenceRequired(TypedDict):
    diff: float
    se: float | None  # sd / sqrt(records); None for one record
    n_records: int


class MeanDifference(_MeanDifferenceRequired, _Interval, total=False):
    """The paired difference of the mean over positions: over records (each record's mean over its positions)."""

    bootstrap_low: float | None  # percentile bootstrap interval over records (always written; older reports lack it)
    bootstrap_high: float | None


class WorstDifference(TypedDict):
    """The difference of the worst position means, with a bootstrap standard error over records."""

    diff: float
    se_bootstrap: float | None


class PairedDifferences(TypedDict):
    """What :func:`differences_by_position_and_record` returns (and the search report holds per pair)."""

    by_position: dict[str, PositionDifference]
    mean: MeanDifference
    worst: WorstDifference
