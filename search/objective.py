"""What one search trial computes: the scores of a factor set, the objective values and the constraint values.

A trial's control points give per-layer factors (:mod:`rope_adapter.search.bezier`); the factors are swapped
into the one ``PeftModel`` of the worker with :func:`rope_adapter.set_factors` and the search samples, tokenised
once (:func:`rope_adapter.scoring.shared_prefix.prepare`), are scored:

- ``score="answer"`` (default): the benchmark's metric from one teacher-forced pass over the whole answer:
  ``exact + TIEBREAK * max(logprob, LOGPROB_FLOOR)`` per sample, where ``exact`` is 1 when every answer token is
  the model's argmax given the gold tokens before it (exactly when greedy decoding writes the answer) and
  ``logprob`` is the mean log-probability of the answer's tokens. The log-prob term (at most 0.1 in size) only
  breaks ties between factor sets with the same accuracy; one more correct sample always outweighs it;
- ``score="soft"``: the same teacher-forced pass, kept continuous: ``sigmoid(m / SOFT_TEMPERATURE)`` per
  sample, where ``m`` is the smallest logit margin over the answer tokens (the gold token's log-prob minus the best
  other token's; ``m > 0`` exactly when ``exact`` is 1). It tends to teacher-forced accuracy as the temperature
  goes to 0, and it sees a sample move towards or away from flipping before it flips. The held-out verdict is
  still taken in the answer score (accuracy);
- ``score="logprob"``: the mean teacher-forced log-probability of the first ``k`` answer tokens of each sample
  (all of them when ``k`` is None); a proxy, never the default: a first-k gain can hide a whole-answer loss;
- ``score="accuracy"``: greedy decoding judged by the task's own rule (0 or 1 per sample; a decode loop).

Per gold position the scores are averaged; the objectives are then

- ``objective="pareto"`` (default, two objectives, both maximised): the mean over the gold positions
  and the worst (smallest) position mean;
- ``objective="weighted"`` (one objective): ``(1 - w) * sum_p a_p m_p / sum_p a_p + w * min_p m_p`` with
  position weights ``a_p`` (default all equal) and worst-position weight ``w``.

The constraints on the factors (bounds, steps, user callables, the perplexity guard) are :mod:`.constraints`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import torch

import rope_adapter
from rope_adapter.errors import LrsError
from rope_adapter.numbers import as_int, as_real, as_reals
from rope_adapter.scoring.generation import greedy_accuracy
from rope_adapter.scoring.logprobs import TokenLogprobs, position_means
from rope_adapter.scoring.shared_prefix import TokenizedTask, token_logprobs

ScoreKind = Literal["answer", "soft", "logprob", "accuracy"]
ObjectiveKind = Literal["pareto", "weighted"]
SCORE_KINDS: tuple[str, ...] = ("answer", "soft", "logprob", "accuracy")
TIEBREAK = 0.01
"""Weight of the whole-answer log-prob in the ``answer`` score (see the module docstring)."""
LOGPROB_FLOOR = -10.0
"""The log-prob term of the ``answer`` score is clipped here, so that it stays below 0.1 in size."""
OBJECTIVE_KINDS: tuple[str, ...] = ("pareto", "weighted")


# --------------------------------------------------------------------------------------------------------------
# objectives
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectiveSpec:
    """How per-sample scores become the study's objective values."""

    score: ScoreKind = field(
        default="answer",
        metadata={
            "help": "'answer': teacher-forced accuracy of the whole answer, log-prob breaking ties; 'soft': "
            "sigmoid of the smallest answer-token logit margin; 'logprob': "
            "mean gold log-prob of the first k answer tokens; 'accuracy': greedy decoding and the task's rule."
        },
    )
    k: int | None = field(default=None, metadata={"help": "Answer tokens averaged by the log-prob score (None: all)."})
    kind: ObjectiveKind = field(
        default="pareto",
        metadata={"help": "'pareto': maximise mean and worst position (two objectives); 'weighted': one fitness."},
    )
    position_weights: tuple[float, ...] | None = field(
        default=None, metadata={"help": "Weights of the gold positions in the weighted fitness (default equal)."}
    )
    worst_weight: float = field(default=0.5, metadata={"help": "Weight w of the worst position in the fitness."})

    def __post_init__(self) -> None:
        if self.score not in SCORE_KINDS:
            raise LrsError(f"score must be one of {SCORE_KINDS}, got {self.score!r}")
        if self.kind not in OBJECTIVE_KINDS:
            raise LrsError(f"objective must be one of {OBJECTIVE_KINDS}, got {self.kind!r}")
        object.__setattr__(self, "k", as_int(self.k, "k", low=1, optional=True))
        object.__setattr__(self, "worst_weight", as_real(self.worst_weight, "worst_weight", low=0.0, high=1.0))
        if self.position_weights is not None:
            weights = tuple(as_reals(self.position_weights, "position_weights", low=0.0))
            if sum(weights) <= 0:
                raise LrsError(f"position_weights must be non-negative with a positive sum, got {list(weights)}")
            object.__setattr__(self, "position_weights", weights)

    @property
    def names(self) -> list[str]:
        """Names of the objective values, in order."""
        return ["mean", "worst"] if self.kind == "pareto" else ["fitness"]

    @property
    def directions(self) -> list[str]:
        """Optuna directions (every objective is maximised)."""
        return ["maximize"] * len(self.names)

    def values(self, by_position: Mapping[int, float]) -> tuple[float, ...]:
        """Objective values of per-position mean scores (positions in increasing order)."""
        means = np.array([by_position[p] for p in sorted(by_position)], dtype=np.float64)
        if means.size == 0:
            raise ValueError("no gold position was scored")
        if self.kind == "pareto":
            return float(means.mean()), float(means.min())
        weights = np.ones_like(means) if self.position_weights is None else np.asarray(self.position_weights, float)
        if weights.shape != means.shape:
            raise ValueError(f"{len(weights)} position weights for {len(means)} gold positions")
        weighted = float((weights * means).sum() / weights.sum())
        return ((1.0 - self.worst_weight) * weighted + self.worst_weight * float(means.min()),)

    def summary(self, by_position: Mapping[int, float]) -> dict[str, float]:
        """``{"mean", "worst"}`` (always) plus ``"fitness"`` for the weighted objective."""
        means = [by_position[p] for p in sorted(by_position)]
        out = {"mean": float(np.mean(means)), "worst": float(np.min(means))}
        if self.kind == "weighted":
            out["fitness"] = self.values(by_position)[0]
        return out


# --------------------------------------------------------------------------------------------------------------
# scoring one factor set
# --------------------------------------------------------------------------------------------------------------


def truncate_targets(task: TokenizedTask, k: int | None) -> TokenizedTask:
    """A copy of ``task`` whose teacher-forced targets keep only their first ``k`` tokens.

    The log-prob of the first ``k`` tokens depends only on the tokens before them (causal attention), so the
    scores are the same while every continuation is shorter; greedy generation is untouched (it reads the
    prompt tokens). Prefix groups stay valid: a group's shared part never reaches into a target.
    """
    if k is None:
        return task
    full = [ids[: start + k] for ids, start in zip(task.full_ids, task.target_start, strict=True)]
    return replace(task, full_ids=full)


@dataclass
class Scored:
    """Scores of one factor set on one tokenised sample set."""

    per_sample: np.ndarray
    by_position: dict[int, float]
    seconds: float
    logprobs: TokenLogprobs | None = None
    predictions: list[str] | None = None
    exact: np.ndarray | None = None  # teacher-forced exact match per sample (score "answer")
    logprob: np.ndarray | None = None  # mean log-prob of the scored answer tokens per sample


SOFT_TEMPERATURE = 1.0
"""Temperature (in nats of logit margin) of the ``soft`` score."""


def soft_score(min_margin: np.ndarray, temperature: float = SOFT_TEMPERATURE) -> np.ndarray:
    """The ``soft`` score per sample: ``sigmoid(min_margin / temperature)`` (0.5 at a tie, > 0.5 when correct)."""
    z = np.clip(np.asarray(min_margin, dtype=np.float64) / temperature, -60.0, 60.0)
    return 1.0 / (1.0 + np.exp(-z))


def answer_score(exact: np.ndarray, logprob: np.ndarray) -> np.ndarray:
    """The ``answer`` score per sample: ``exact + TIEBREAK * max(logprob, LOGPROB_FLOOR)``."""
    return np.asarray(exact, dtype=np.float64) + TIEBREAK * np.maximum(np.asarray(logprob, float), LOGPROB_FLOOR)


class Evaluator:
    """Scores factor sets on tokenised samples with one model, swapping factors in place.

    Args:
        model: a ``PeftModel`` with an LRS adapter (made once per worker with ``get_peft_model``).
        spec: the score kind and ``k``.
        judge: the task's greedy rule (``task.is_correct``), needed for ``score="accuracy"``.
        batch_size, max_batch_tokens: passed to the scoring functions.
        perplexity: tokenised text windows for the perplexity guard (optional).
    """

    def __init__(
        self,
        model: Any,
        spec: ObjectiveSpec,
        *,
        judge: Callable[[str, Any], bool] | None = None,
        batch_size: int = 4,
        max_batch_tokens: int = 4096,
        perplexity: TokenizedTask | None = None,
    ) -> None:
        if spec.score == "accuracy" and judge is None:
            raise ValueError("score='accuracy' needs the task's greedy rule (judge)")
        self.model = model
        self.spec = spec
        self.judge = judge
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.perplexity = perplexity

    def set_factors(self, factors: Sequence[float] | np.ndarray) -> None:
        """Swap the factors into the model (no re-injection)."""
        rope_adapter.set_factors(self.model, [float(f) for f in factors])

    def score(
        self, factors: Sequence[float] | np.ndarray, task: TokenizedTask, *, keep_logprobs: bool = False
    ) -> Scored:
        """Per-sample scores of ``factors`` on ``task`` (the answer score, the log-prob of the first k tokens, or
        0/1 greedy accuracy)."""
        self.set_factors(factors)
        start = time.perf_counter()
        logprobs = predictions = exact = logprob = None
        with torch.inference_mode():
            if self.spec.score in ("answer", "soft", "logprob"):
                logprobs = token_logprobs(
                    self.model, task, batch_size=self.batch_size, max_batch_tokens=self.max_batch_tokens
                )
                k = self.spec.k if self.spec.score == "logprob" else None
                logprob = logprobs.mean(k)
                if self.spec.score == "logprob":
                    per_sample = logprob
                else:
                    exact = logprobs.exact()
                    per_sample = (
                        answer_score(exact, logprob)
                        if self.spec.score == "answer"
                        else soft_score(logprobs.min_margin())
                    )
            else:
                result = greedy_accuracy(
                    self.model, task, self.judge, batch_size=self.batch_size, max_batch_tokens=self.max_batch_tokens
                )
                per_sample = result.correct.astype(np.float64)
                predictions = result.predictions
        seconds = time.perf_counter() - start
        return Scored(
            per_sample=per_sample,
            by_position=position_means(task.positions, per_sample),
            seconds=seconds,
            logprobs=logprobs if keep_logprobs else None,
            predictions=predictions,
            exact=exact,
            logprob=logprob,
        )

    def accuracy(self, factors: Sequence[float] | np.ndarray, task: TokenizedTask, judge: Callable) -> Scored:
        """Greedy accuracy of ``factors`` on ``task`` whatever the search score is (for held-out reports)."""
        self.set_factors(factors)
        start = time.perf_counter()
        with torch.inference_mode():
            result = greedy_accuracy(
                self.model, task, judge, batch_size=self.batch_size, max_batch_tokens=self.max_batch_tokens
            )
        per_sample = result.correct.astype(np.float64)
        return Scored(
            per_sample,
            position_means(task.positions, per_sample),
            time.perf_counter() - start,
            None,
            result.predictions,
        )

    def nll(self, factors: Sequence[float] | np.ndarray) -> float:
        """Mean negative log-likelihood per token of the perplexity text (``exp`` of it is the perplexity)."""
        if self.perplexity is None:
            raise ValueError("no perplexity text was given to this evaluator")
        self.set_factors(factors)
        with torch.inference_mode():
            logprobs = token_logprobs(
                self.model, self.perplexity, batch_size=self.batch_size, max_batch_tokens=self.max_batch_tokens
            )
        tokens = np.concatenate(logprobs.values)
        return float(-tokens.mean())
