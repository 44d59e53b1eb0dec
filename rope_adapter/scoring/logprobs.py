"""What a teacher-forced pass gives per sample (:class:`TokenLogprobs`: log-probs, argmax matches, logit margins)
and the one position mean of search and eval."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .tasks.base import Sample


@dataclass
class TokenLogprobs:
    """Per-sample log-probabilities of each target token (natural log), and whether each target token was the
    model's argmax given the gold tokens before it (``greedy``, from the same forward pass)."""

    samples: list[Sample]
    values: list[np.ndarray]
    greedy: list[np.ndarray] | None = None
    rows: list[int] | None = None
    """The ``TokenizedTask.full_ids`` row (answer form) each sample's values come from; None: row i = sample i."""
    margins: list[np.ndarray] | None = None
    """Per target token: its log-prob minus the largest log-prob of any other token (the logit margin; > 0 exactly
    when the token is the argmax), from the same forward pass."""

    def min_margin(self) -> np.ndarray:
        """Per sample, the smallest margin over its target tokens: > 0 exactly when :meth:`exact` is True (ties
        aside), and how far from flipping the sample is."""
        if self.margins is None:
            raise ValueError("these log-probs were computed without margins")
        return np.array([float(m.min()) for m in self.margins])

    def exact(self) -> np.ndarray:
        """Teacher-forced exact match per sample: every target token is the argmax given the gold prefix.

        That is exactly when greedy decoding reproduces the whole target (ties aside), so for a task whose target
        is the answer as the model writes it this is greedy accuracy without a decode loop.
        """
        if self.greedy is None:
            raise ValueError("these log-probs were computed without argmax matches")
        return np.array([bool(g.all()) for g in self.greedy])

    def mean(self, k: int | None = None) -> np.ndarray:
        """Per-sample mean log-prob of the first ``k`` target tokens (all tokens when ``k`` is None)."""
        if k is not None and k < 1:
            raise ValueError(f"k must be >= 1 or None, got {k}")
        return np.array([float(v[:k].mean()) for v in self.values])

    def by_position(self, k: int | None = None) -> dict[int, float]:
        """Mean of :meth:`mean` over the samples at each gold position."""
        return mean_by_position(self.samples, self.mean(k))


def position_means(positions: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> dict[int, float]:
    """``{position: mean score}`` in increasing position order (the one position mean of search and eval)."""
    positions = np.asarray(positions)
    scores = np.asarray(scores, dtype=np.float64)
    if positions.shape != scores.shape:
        raise ValueError(f"{scores.shape} scores for {positions.shape} positions")
    return {int(p): float(scores[positions == p].mean()) for p in np.unique(positions)}


def mean_by_position(samples: Sequence[Sample], scores: Sequence[float] | np.ndarray) -> dict[int, float]:
    """:func:`position_means` of the samples' gold positions."""
    if len(scores) != len(samples):
        raise ValueError(f"{len(scores)} scores for {len(samples)} samples")
    return position_means([s.position for s in samples], scores)


def token_margins(logprobs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each target's log-prob minus the best other token's (``logprobs``: ``[n, vocab]``, ``targets``: ``[n]``)."""
    top = logprobs.topk(2, dim=-1)
    gold = logprobs.gather(-1, targets[:, None])[:, 0]
    other = torch.where(top.indices[:, 0] == targets, top.values[:, 1], top.values[:, 0])
    return gold - other
