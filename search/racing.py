"""Racing: score a trial on a few search records first and go on only while it is not clearly worse.

A search set of the paper's size (200 samples and more) costs one long forward pass per record for every trial,
and most proposals are no better than what the study already holds. Racing (as in F-Race and irace)
scores a trial in stages, on growing prefixes of the same record order: after each stage the trial's per-record
scores are paired with those of the study's **reference** (the fully scored trial with the best mean so far) on
the same records, and the trial stops when the paired difference is clearly negative:

    mean(d) + z * sd(d) / sqrt(n) < 0,    d_r = score_r(trial) - score_r(reference),  r = records so far

(one-sided, ``z = 1.645`` by default; a record's score is the mean of its samples' scores over the gold
positions). Only survivors are scored on the whole search set.

How a stopped trial is recorded, so that the sampler is not misled: it is a COMPLETE trial whose objective values are
an estimate of its whole-set values, its partial per-position means shifted by the reference's own difference
between the whole set and the same partial records (a control variate: the records it was not scored on are
treated as the reference saw them). Its values therefore sit on the same scale as fully scored trials, below the
reference, and the sampler takes it like the others; it is marked ``raced_out`` in the trial's user attributes and is
never chosen as the adapter. The unscaled model is always scored in full; a uniform factor races against the
best fully scored baseline, so it stops only when another baseline is clearly better on the search records.

Everything here is pure (numpy): the study calls it with the scores it computed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

DEFAULT_Z = 1.645
"""One-sided 95 % normal quantile: stop when the trial is clearly worse than the reference."""
MIN_STAGE_RECORDS = 4
"""The first stage has at least this many records (a paired test on fewer says little)."""


def stage_ends(num_records: int, fractions: Sequence[float]) -> list[int]:
    """Record counts after each stage (increasing, the last one ``num_records``).

    ``fractions`` are the shares of the search records scored before each check (e.g. ``(0.2, 0.5)``: checks after
    20 % and 50 % of the records, then the rest). Stages that would hold fewer than :data:`MIN_STAGE_RECORDS`
    records or repeat a count are dropped; an empty ``fractions`` means one stage (no racing).
    """
    if num_records < 1:
        raise ValueError(f"need at least one search record, got {num_records}")
    ends = []
    for fraction in fractions:
        if not 0.0 < float(fraction) < 1.0:
            raise ValueError(f"race stage fractions must lie strictly between 0 and 1, got {fraction}")
        end = int(math.ceil(float(fraction) * num_records))
        if end >= MIN_STAGE_RECORDS and end < num_records and (not ends or end > ends[-1]):
            ends.append(end)
    return ends + [num_records]


def record_scores(per_sample: Sequence[float], sample_records: Sequence[int], num_records: int) -> np.ndarray:
    """Mean score of each record (index ``0 .. num_records - 1``) over its samples; NaN for unscored records."""
    scores = np.asarray(per_sample, dtype=np.float64)
    index = np.asarray(sample_records[: len(scores)], dtype=np.int64)
    sums = np.bincount(index, weights=scores, minlength=num_records)
    counts = np.bincount(index, minlength=num_records)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


class RaceCheckEntry(TypedDict):
    """A :class:`RaceCheck` as a trial's record holds it."""

    records: int
    diff: float
    se: float
    stop: bool


@dataclass(frozen=True)
class RaceCheck:
    """The paired comparison of a trial with the reference on the records scored so far."""

    records: int
    diff: float  # mean over records of trial - reference
    se: float
    stop: bool

    def to_dict(self) -> RaceCheckEntry:
        """JSON-friendly."""
        return {"records": self.records, "diff": self.diff, "se": self.se, "stop": self.stop}


def paired_check(trial_records: np.ndarray, reference_records: np.ndarray, z: float = DEFAULT_Z) -> RaceCheck:
    """Compare per-record scores (the first ``len(trial_records)`` records of the reference are used)."""
    trial = np.asarray(trial_records, dtype=np.float64)
    reference = np.asarray(reference_records, dtype=np.float64)[: len(trial)]
    d = trial - reference
    n = len(d)
    diff = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    stop = bool(n > 1 and diff + z * se < 0)
    return RaceCheck(records=n, diff=diff, se=se, stop=stop)


def estimated_by_position(
    trial_partial: Mapping[int, float],
    reference_partial: Mapping[int, float],
    reference_full: Mapping[int, float],
) -> dict[int, float]:
    """A stopped trial's whole-set position means: its partial means plus the reference's (full - partial)."""
    return {p: float(trial_partial[p] + reference_full[p] - reference_partial[p]) for p in sorted(trial_partial)}
