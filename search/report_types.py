"""``search_report.json``: one typed definition that its writers (:func:`~rope_adapter.search.report.build_report`,
:func:`~rope_adapter.search.holdout.add_holdout`) build and its readers (the Markdown summary, the plots, the
results record, the adapter's provenance) read. ``SearchResult.report`` is one of these.

Parts other writers build are typed beside them and imported here: a paired difference
(:class:`~rope_adapter.scoring.paired.PairedDifferences`), the task (:class:`~rope_adapter.provenance.ProvenanceTask`)
and a trial's race checks (:mod:`rope_adapter.search.trial_info`).
"""

from __future__ import annotations

from typing import TypedDict

from rope_adapter.differences import PairedDifferences
from rope_adapter.json_types import JsonValue
from rope_adapter.provenance import ProvenanceTask

from .trial_info import TrialPerplexity, TrialRace


class ModelSummary(TypedDict):
    name: str
    num_layers: int
    base_model_name_or_path: str | None


class RacingSummary(TypedDict):
    """How many search records (prefix forward passes) the trials scored, against scoring every one in full."""

    stage_ends: list[int]
    z: float
    scored_trials: int
    raced_out: int
    records_scored: int
    records_without_racing: int
    saved_fraction: float


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
    running: int


class StudySummary(_StudyRequired, total=False):
    repeats_pruned: int  # always written; reports written before repeats were pruned lack it
    racing: RacingSummary  # always written; reports written before racing lack it
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
    tokens_per_trial: dict[str, int]  # "separate", "shared_prefix"
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


class _ChosenRequired(TypedDict):
    number: int
    baseline: str | None
    factors: list[float]
    control_points: list[list[float]] | None
    objectives: dict[str, float] | None
    by_position: dict[str, float] | None
    on_pareto_front: bool
    select: str


class ChosenCurve(_ChosenRequired, total=False):
    """The trial the search chose (its factors go into the adapter). The keys below are always written; older
    reports lack them."""

    accuracy_by_position: dict[str, float] | None
    logprob_by_position: dict[str, float] | None
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


class HoldoutDifferences(PairedDifferences, total=False):
    """A held-out pair ("found-base", ...): the paired difference of the score, and of the other measures taken."""

    accuracy: PairedDifferences  # greedy accuracy (holdout_accuracy)
    tf_accuracy: PairedDifferences  # teacher-forced accuracy
    whole_answer: PairedDifferences  # log-prob of every answer token (when the score is not that already)


class KSelectionSummary(TypedDict):
    """The number of answer tokens that best separates the gold positions on the base model's held-out scores."""

    best_k: int
    f_statistic: dict[str, float]  # k -> one-way ANOVA F across positions
    position_means: dict[str, dict[str, float]]  # k -> position -> mean


class _HoldoutRequired(TypedDict):
    records: int
    samples: int
    samples_per_position: dict[str, int]
    score: str  # the verdict's score: "answer" for a search scored with "soft"
    k: int | None
    configs: dict[str, HoldoutConfig]
    differences: dict[str, HoldoutDifferences]  # "found-base", "found-best_uniform", "best_uniform-base"
    verdict: str
    seconds: float


class Holdout(_HoldoutRequired, total=False):
    search_score: str  # the search's own score (always written; older reports lack it)
    k_selection: KSelectionSummary
    by_length: dict[str, dict[str, HoldoutDifferences]]  # multi-length: pairs -> "found-base" -> paired differences


class LengthEntry(TypedDict):
    """One record length of a multi-length study: mean and worst over its gold positions, per configuration."""

    pairs: int
    positions: list[int]
    search: dict[str, dict[str, float]]  # "base", "best_uniform", "found" -> {"mean", "worst"} on the search set
    confirmation: dict[str, dict[str, float]]  # trial number -> {"mean", "worst"} on the confirmation records
    holdout: dict[str, dict[str, float]]  # "base", "best_uniform", "found" -> {"mean", "worst"} held out
    differences: dict[str, HoldoutDifferences]  # held out, paired by record: "found-base" -> paired differences


class _TrialRecordRequired(TypedDict):
    number: int
    state: str  # Optuna's TrialState name: "COMPLETE", "PRUNED", "FAIL", "RUNNING", ...
    baseline: str | None  # "base", "uniform" or None for a searched curve
    uniform: float | None
    params: dict[str, float]
    control_points: list[list[float]] | None
    factors: list[float] | None
    constraints: list[float] | None
    feasible: bool
    evaluated: bool
    values: list[float] | None
    objectives: dict[str, float] | None
    by_position: dict[str, float] | None
    sample_scores: list[float] | None
    perplexity: TrialPerplexity | None
    eval_seconds: float | None
    seconds: float | None
    duration_seconds: float | None
    worker: str | None
    datetime_start: str | None  # ISO 8601
    datetime_complete: str | None


class TrialRecord(_TrialRecordRequired, total=False):
    """One trial of the study as the report lists it (``selection.trial_record``): the trial's own record
    (:class:`~rope_adapter.search.trial_info.TrialInfo`) flattened, with Optuna's state, values and times. The keys
    below are always written; reports written before racing and pruned repeats lack them."""

    duplicate_of: int | None
    records_scored: int | None
    raced_out: bool
    race: TrialRace | None
    accuracy_by_position: dict[str, float] | None
    logprob_by_position: dict[str, float] | None


class _ReportRequired(TypedDict):
    format: str
    settings: dict[str, JsonValue]  # SearchSettings flat (settings.settings_dict): its fields are the keys
    model: ModelSummary
    study: StudySummary
    task: ProvenanceTask
    timing: TimingSummary
    baselines: Baselines
    pareto_front: list[int]
    chosen: ChosenCurve | None
    search_comparison: dict[str, PairedDifferences]  # on the search set: "found-base", "found-best_uniform"
    trials: list[TrialRecord]


class SearchReport(_ReportRequired, total=False):
    holdout: Holdout | None  # added by the held-out step (None without held-out records)
    confirmation: Confirmation | None  # None with confirm_top 0 (the choice is the search set's)
    by_length: list[LengthEntry] | None  # multi-length studies (search.lengths); None with one length
