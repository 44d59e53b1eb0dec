"""What ``LrsConfig.provenance`` holds when a search wrote it: one typed definition that the writer
(``rope_adapter.search.report.provenance``) builds and every reader (the model card, ``rope-adapter info``)
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
    positions: list[int]
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


class ProvenanceScores(TypedDict, total=False):
    objectives: list[str]
    search: SearchScores
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
