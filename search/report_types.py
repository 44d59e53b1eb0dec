"""``search_report.json``: one typed definition that its writers (:func:`~rope_adapter.search.report.build_report`,
:func:`~rope_adapter.search.holdout.add_holdout`) build and its readers (the Markdown summary, the plots, the
results record, the adapter's provenance) read. ``SearchResult.report`` is one of these.

Deep, open-ended parts (a trial's record, a paired difference, the settings) stay ``dict[str, Any]``: their keys
are listed where they are built (``trial_record``, ``differences_by_position_and_record``, ``settings_dict``).
"""

from __future__ import annotations

from typing import Any, TypedDict

from rope_adapter.provenance import ProvenanceTask


class ModelSummary(TypedDict):
    name: str
    num_layers: int
    base_model_name_or_path: str | None


class _StudyRequired(TypedDict):
    name: str
    storage: str  # without local paths or credentials
    sampler: str
    sampler_seed_main_worker: int | None
    seed: int
    objectives: list[str]
    constraint_names: list[str]
    trials: int
    complete: int
    evaluated: int
    infeasible: int
    failed: int
    repeats_pruned: int
    running: int
    racing: dict[str, Any]


class StudySummary(_StudyRequired, total=False):
    worker_errors: list[str]  # added when the workers have finished


class _TimingRequired(TypedDict):
    search_seconds_this_run: float
    trials_this_run: int
    trials_per_minute_this_run: float | None
    study_span_seconds: float | None
    trials_per_minute_study: float | None
    evaluated_trials_per_minute_study: float | None
    median_eval_seconds: float | None
    seconds_per_scored_sample: float | None
    search_samples: int
    search_records: int
    tokens_per_trial: dict[str, Any]
    workers: int
    device: str
    dtype: str


class TimingSummary(_TimingRequired, total=False):
    total_seconds: float  # added at the end of the run


class ConfigSummary(TypedDict):
    """A baseline trial (the base model, a uniform factor) as the report names it."""

    trial: int
    baseline: str | None  # "base", "uniform" or None for a searched curve
    uniform: float | None
    factors: list[float] | None
    control_points: list[list[float]] | None
    objectives: dict[str, float] | None
    by_position: dict[str, float] | None
    perplexity: float | None


class Baselines(TypedDict):
    base: ConfigSummary | None
    best_uniform: ConfigSummary | None
    uniform: list[ConfigSummary | None]


class ChosenCurve(TypedDict):
    """The trial the search chose (its factors go into the adapter)."""

    number: int
    baseline: str | None
    factors: list[float]
    control_points: list[list[float]] | None
    objectives: dict[str, float] | None
    by_position: dict[str, float] | None
    accuracy_by_position: dict[str, float] | None
    logprob_by_position: dict[str, float] | None
    on_pareto_front: bool
    select: str
    warning: str | None


class ConfirmedCandidate(TypedDict):
    """One top curve re-scored on the confirmation records (scores in the search's own score)."""

    trial: int
    group: str  # "searched" or "uniform"
    uniform: float | None
    factors: list[float]
    search: dict[str, float]  # the trial's objectives on the search set ("mean", "worst", "fitness")
    confirmation: dict[str, float]  # the same on the confirmation records
    by_position: dict[str, float]  # confirmation score per gold position
    gap: dict[str, float]  # selection gap: search minus confirmation, per objective
    scored_this_run: bool  # False: read back from the study (a resumed study does not score it again)


class Confirmation(TypedDict):
    """The confirmation stage: the top ``top`` searched curves and uniform factors on fresh records, and what was
    chosen on them (the adapter and the best uniform factor) against what the search set alone would choose."""

    top: int
    records: int
    samples: int
    candidates: list[ConfirmedCandidate]
    found: int | None  # trial chosen on the confirmation records (the adapter)
    best_uniform: int | None
    search_found: int | None  # the search set's own choices, for comparison
    search_best_uniform: int | None
    seconds: float


class HoldoutConfig(TypedDict, total=False):
    """One configuration (base, best_uniform, found) scored on the held-out records."""

    factors: list[float]
    by_position: dict[str, float]
    mean: float
    worst: float
    seconds: float
    uniform: float  # best_uniform only
    trial: int  # found only
    mean_logprob_all_answer_tokens: dict[str, float]
    tf_accuracy_by_position: dict[str, float]
    tf_accuracy: float
    accuracy_by_position: dict[str, float]
    perplexity: float


class _HoldoutRequired(TypedDict):
    records: int
    samples: int
    samples_per_position: dict[str, int]
    score: str  # the verdict's score: "answer" for a search scored with "soft"
    search_score: str
    k: int | None
    configs: dict[str, HoldoutConfig]
    differences: dict[str, dict[str, Any]]  # "found-base" -> a paired difference (+ "accuracy", "tf_accuracy", ...)
    verdict: str
    seconds: float


class Holdout(_HoldoutRequired, total=False):
    k_selection: dict[str, Any]
    by_length: dict[str, dict[str, dict[str, Any]]]  # multi-length: pairs -> "found-base" -> paired difference


class LengthEntry(TypedDict):
    """One record length of a multi-length study: mean and worst over its gold positions, per configuration."""

    pairs: int
    positions: list[int]
    search: dict[str, dict[str, float]]  # "base", "best_uniform", "found" -> {"mean", "worst"} on the search set
    confirmation: dict[str, dict[str, float]]  # trial number -> {"mean", "worst"} on the confirmation records
    holdout: dict[str, dict[str, float]]  # "base", "best_uniform", "found" -> {"mean", "worst"} held out
    differences: dict[str, dict[str, Any]]  # held out, paired by record: "found-base" -> paired difference


class _ReportRequired(TypedDict):
    format: str
    settings: dict[str, Any]
    model: ModelSummary
    study: StudySummary
    task: ProvenanceTask
    timing: TimingSummary
    baselines: Baselines
    pareto_front: list[int]
    chosen: ChosenCurve | None
    search_comparison: dict[str, dict[str, Any]]
    trials: list[dict[str, Any]]


class SearchReport(_ReportRequired, total=False):
    holdout: Holdout | None  # added by the held-out step (None without held-out records)
    confirmation: Confirmation | None  # None with confirm_top 0 (the choice is the search set's)
    by_length: list[LengthEntry] | None  # multi-length studies (search.lengths); None with one length
