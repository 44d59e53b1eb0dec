"""The scores of a position sweep: their titles, direction and the interval that summarises each group."""

from __future__ import annotations

from typing import Any

from .intervals import mean_interval, proportion_interval

METRICS: dict[str, dict[str, Any]] = {
    "accuracy": {
        "title": "Accuracy (greedy, benchmark rule)",
        "short": "accuracy",
        "higher_is_better": True,
        "interval": proportion_interval,
    },
    "tf_accuracy": {
        "title": "Accuracy (teacher-forced: every answer token is the argmax, i.e. greedy writes the answer)",
        "short": "teacher-forced accuracy",
        "higher_is_better": True,
        "interval": proportion_interval,
    },
    "logprob": {
        "title": "Gold log-probability (teacher-forced, mean per target token)",
        "short": "gold log-prob",
        "higher_is_better": True,
        "interval": mean_interval,
    },
}
"""Scores of a position sweep; ``interval`` summarises one group of per-sample values."""
