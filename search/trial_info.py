"""What a search trial stores in the study (the trial user attribute :data:`~rope_adapter.search.storage.TRIAL_ATTR`):
one typed definition that the objective (:mod:`rope_adapter.search.trial`) writes and every reader (the report's
trial records, the racing reference, the stopping callbacks) reads. Kept apart from the objective so that readers
of the report import it without Optuna."""

from __future__ import annotations

from typing import TypedDict

from .racing import RaceCheckEntry


class TrialPerplexity(TypedDict):
    """The perplexity guard's reading: the curve's perplexity on the guard text and the unscaled model's."""

    ppl: float
    base_ppl: float


class TrialRace(TypedDict):
    """A raced trial: the trial it was compared with and the check after each stage."""

    reference: int
    checks: list[RaceCheckEntry]


class TrialScores(TypedDict, total=False):
    """The score fields of a scored trial (scored stage by stage, see ``trial._score_in_stages``)."""

    records_scored: int
    sample_scores: list[float]  # per search sample, rounded to 6 digits
    eval_seconds: float
    accuracy_by_position: dict[str, float]  # teacher-forced, gold position -> mean
    logprob_by_position: dict[str, float]
    race: TrialRace  # only when it raced
    raced_out: bool  # stopped early: by_position is then estimated through the reference
    partial_by_position: dict[str, float]  # a raced-out trial's own means on the records it scored
    by_position: dict[str, float]  # the score per gold position


class _TrialInfoRequired(TypedDict):
    control_points: list[list[float]]
    factors: list[float] | None  # None: the curve broke a constraint before its factors were made
    worker: str
    evaluated: bool


class TrialInfo(_TrialInfoRequired, TrialScores, total=False):
    """The trial user attribute, as the objective writes it."""

    perplexity: TrialPerplexity  # with the perplexity guard on
    constraints: list[float]  # <= 0: met
    objectives: dict[str, float]  # "mean", "worst" or "fitness"
    seconds: float
    duplicate_of: int  # a repeated proposal: the earlier trial with the same parameters
