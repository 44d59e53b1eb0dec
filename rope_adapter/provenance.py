"""What ``LrsConfig.provenance`` holds when a search wrote it: one typed definition that the writer
(``rope_adapter.search.adapter_provenance.provenance``) builds and every reader (the model card, ``rope-adapter info``)
reads.

Provenance is a free JSON object in ``adapter_config.json`` (a user may write their own, or none), so every key
is optional to a reader (``total=False``); the search always writes all of them. Keys a reader does not know are
shown as they are, never dropped silently.
"""

from __future__ import annotations

from typing import Any, TypedDict

from .differences import MeanDifference, WorstDifference
from .json_types import JsonValue


class ProvenanceCurve(TypedDict, total=False):
    """The Bézier curve the factors lie on."""

    degree: int
    x_mode: str  # "fixed" or "free" control-point depths
    control_points: list[list[float]]  # [[depth in [0, 1], factor], ...]
    s_min: float
    s_max: float


class ProvenanceStudy(TypedDict, total=False):
    """The Optuna study the curve came from (the storage URL without local paths or credentials)."""

    name: str
    storage: str
    trial: int
    sampler: str  # e.g. "GPSampler(n_startup_trials=10)"
    seed: int


class ProvenanceTask(TypedDict, total=False):
    """The fitness task the search scored curves on."""

    name: str
    data: str  # "generated" or the data file's name
    pairs: int | list[int] | None  # a list: a study over several record lengths
    positions: list[int]  # a study over several lengths: its (length, position) keys, read with position_labels
    position_labels: dict[str, str]  # several lengths only: position key -> "pairs:position" ("50:12")
    search_records: int
    holdout_records: int
    data_seed: int
    score: str
    k: int | None
    chat_template: Any
    options: dict[str, JsonValue]  # the task's own options


class SearchScores(TypedDict, total=False):
    """The found curve's scores on the search records (objective name -> value, plus the keys below)."""

    by_position: dict[str, float]
    mean: float  # the objectives of a Pareto search
    worst: float
    fitness: float  # the objective of a weighted search
    warning: str


class HeldOutDifference(TypedDict):
    """A held-out paired difference of the found curve (from the search report's ``holdout.differences``)."""

    mean: MeanDifference
    worst: WorstDifference


class HeldOutScores(TypedDict, total=False):
    """The found curve's scores on the held-out records, against the base and the best uniform factor."""

    by_position: dict[str, float]
    mean: float
    worst: float
    base_mean: float
    best_uniform_mean: float | None
    differences: dict[str, HeldOutDifference]  # "found-base", "found-best_uniform"
    verdict: str


class ConfirmedScores(TypedDict, total=False):
    """The found curve's scores on the confirmation records, on which the search chose it among its top curves
    (``--confirm-top``); a score that is not a finite number is null."""

    records: int
    samples: int
    by_position: dict[str, float]
    mean: float  # the objectives, as in SearchScores
    worst: float
    fitness: float
    by_length: dict[str, dict[str, float]]  # several lengths: pairs -> {"mean": .., "worst": ..}
    search_found: int | None  # the trial the search records alone would have chosen


class ProvenanceScores(TypedDict, total=False):
    objectives: list[str]
    search: SearchScores
    confirmation: ConfirmedScores  # written when the search confirms its top curves (confirm_top > 0)
    holdout: HeldOutScores


class Provenance(TypedDict, total=False):
    """How the factors were found."""

    method: str  # "bezier-<sampler>"
    curve: ProvenanceCurve
    study: ProvenanceStudy
    task: ProvenanceTask
    scores: ProvenanceScores


SECTIONS: dict[str, type] = {
    "curve": ProvenanceCurve,
    "study": ProvenanceStudy,
    "task": ProvenanceTask,
    "scores": ProvenanceScores,
}
"""Provenance key -> the TypedDict of its value (a reader's key list: ``SECTIONS[k].__annotations__``)."""
