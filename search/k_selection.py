"""Which number k of answer tokens separates the gold positions best (a diagnostic of the first-k score)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rope_adapter.scoring.logprobs import TokenLogprobs


@dataclass
class KSelection:
    """How well the mean log-prob of the first k target tokens separates gold positions, for k = 1..max_k."""

    k: int  # the k with the largest F statistic
    f_statistic: dict[int, float]  # one-way ANOVA F across positions
    spread: dict[int, float]  # variance of the per-position means
    position_means: dict[int, dict[int, float]]  # k -> {position: mean}


def select_k(logprobs: TokenLogprobs, max_k: int = 8) -> KSelection:
    """Choose the number of target tokens whose mean log-prob best separates the gold positions.

    For each k the per-sample score is the mean log-prob of the first k target tokens (all of them for shorter
    targets). The F statistic of a one-way ANOVA (between-position mean square over within-position mean square)
    rewards differences between positions relative to the noise between samples; the largest F wins, ties going
    to the smaller k. ``spread`` (the variance of the per-position means) is reported alongside.
    """
    if max_k < 1:
        raise ValueError(f"max_k must be >= 1, got {max_k}")
    positions = np.array([s.position for s in logprobs.samples])
    levels = np.unique(positions)
    if len(levels) < 2:
        raise ValueError("need samples at two or more gold positions to compare them")
    n, g = len(positions), len(levels)
    longest = max(len(v) for v in logprobs.values)
    f_stat, spread, means = {}, {}, {}
    for k in range(1, min(max_k, longest) + 1):
        scores = logprobs.mean(k)
        group_means = np.array([scores[positions == p].mean() for p in levels])
        counts = np.array([(positions == p).sum() for p in levels])
        between = float((counts * (group_means - scores.mean()) ** 2).sum() / (g - 1))
        within_ss = sum(
            float(((scores[positions == p] - m) ** 2).sum()) for p, m in zip(levels, group_means, strict=True)
        )
        within = within_ss / (n - g) if n > g else 0.0
        if within > 0:
            f_stat[k] = between / within
        else:
            f_stat[k] = math.inf if between > 0 else 0.0
        spread[k] = float(group_means.var())
        means[k] = {int(p): float(m) for p, m in zip(levels, group_means, strict=True)}
    best = max(f_stat, key=lambda k: (f_stat[k], -k))
    return KSelection(k=best, f_statistic=f_stat, spread=spread, position_means=means)
