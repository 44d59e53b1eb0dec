"""The results record of the search's held-out step: the search builds its
:class:`~rope_adapter.scoring.results_table.ResultsTable` itself, from what :func:`.holdout.add_holdout` wrote.

This is the only code that turns the held-out step's keys into the record (written as ``OUT/adapter/
results_table.json``, which the model card reads): ``base`` / ``best_uniform`` / ``found`` on the held-out
records, the search score, teacher-forced accuracy (Wilson intervals from the proportions), greedy accuracy, the
whole-answer log-probability and the paired differences with t intervals from their standard errors.
:data:`HOLDOUT_KEYS`, :data:`CONFIG_KEYS` and :data:`DIFFERENCE_KEYS` name every key the held-out step writes,
shown or knowingly left out: a test fails when it writes one that is in none of them.
"""

from __future__ import annotations

from collections.abc import Mapping

from rope_adapter.differences import PairedDifferences
from rope_adapter.scoring.intervals import CONFIDENCE
from rope_adapter.scoring.metrics import PROPORTIONS, metric_title
from rope_adapter.scoring.results_table import (
    Cell,
    Comparison,
    MetricTable,
    ResultsTable,
    ResultsTableError,
    TableVariant,
    finite,
    proportion_cell,
    t_difference,
)

from .report_types import HoldoutConfig, SearchReport

LABELS = {"base": "base (all factors 1)", "best_uniform": "best uniform", "found": "found"}
ROLES = {"base": "base", "best_uniform": "uniform", "found": "found"}

LAYOUT = [  # (metric, per-position key, overall key, difference key), in the order a reader sees them
    ("tf_accuracy", "tf_accuracy_by_position", "tf_accuracy", "tf_accuracy"),
    ("accuracy", "accuracy_by_position", None, "accuracy"),
    (None, "by_position", "mean", None),  # the search score (named by the held-out step's "score" and "k")
    ("logprob", "mean_logprob_all_answer_tokens", None, "whole_answer"),
]
"""Each metric of the record and the keys of a held-out configuration and difference it is read from."""

HOLDOUT_KEYS = {
    "shown": {"records", "samples", "samples_per_position", "score", "k", "configs", "differences", "verdict"},
    "left out": {"search_score", "k_selection", "seconds"},
}
CONFIG_KEYS = {
    "shown": {"factors", "uniform", "trial"} | {k for _, key, overall, _ in LAYOUT for k in (key, overall) if k},
    "left out": {"worst", "seconds", "perplexity"},
}
DIFFERENCE_KEYS = {
    "shown": {"by_position", "mean"} | {d for *_, d in LAYOUT if d},
    "left out": {"worst"},
}
"""Every key of the held-out step's output (``report["holdout"]``, one of its ``configs``, one of its
``differences``): shown in the record, or knowingly left out of it."""


def holdout_table(report: SearchReport) -> ResultsTable:
    """The held-out comparison of a search report (the dict search_report.json holds) as the results record."""
    holdout = report.get("holdout")
    if not isinstance(holdout, Mapping) or not holdout.get("configs"):
        raise ResultsTableError("the search report has no held-out comparison (the search ran without one)")
    configs: dict[str, HoldoutConfig] = holdout["configs"]
    task = report.get("task") or {}
    positions = sorted({int(p) for c in configs.values() for p in c.get("by_position", {})})
    counts = {str(p): int(n) for p, n in (holdout.get("samples_per_position") or {}).items()}
    samples = holdout.get("samples")
    score = str(holdout.get("score") or task.get("score") or "score")
    score_name = f"{score}@{holdout['k']}" if holdout.get("k") else score
    metrics = []
    for metric, key, overall_key, diff_key in LAYOUT:
        name = metric or score_name
        if name == "logprob" and score_name == "logprob":
            continue  # the score is the whole-answer log-prob already
        present = {c: v[key] for c, v in configs.items() if isinstance(v.get(key), Mapping)}
        if not present:
            continue
        proportion = name in PROPORTIONS
        cells = {
            c: {p: _cell(m, counts.get(p), proportion) for p, m in row.items() if finite(m) is not None}
            for c, row in present.items()
        }
        overall = {}
        for c, row in present.items():
            value = finite(configs[c].get(overall_key)) if overall_key else None
            if value is None:
                value = _weighted_mean(row, counts)
            if value is not None:
                overall[c] = _cell(value, samples, proportion)
        comparisons = []
        for pair, d in (holdout.get("differences") or {}).items():
            entry = d if diff_key is None else d.get(diff_key)
            if not isinstance(entry, Mapping) or "-" not in pair:
                continue
            a, b = pair.split("-", 1)
            comparisons.append(_comparison(a, b, entry, CONFIDENCE))
        metrics.append(
            MetricTable(
                name=name,
                title=metric_title(name.split("@")[0], default=name)
                + (f", first {holdout['k']} tokens" if name.startswith("logprob@") else ""),
                higher_is_better=True,
                interval="wilson" if proportion else None,
                cells=cells,
                overall=overall,
                comparisons=comparisons,
            )
        )
    notes = [str(holdout["verdict"])] if holdout.get("verdict") else []
    return ResultsTable(
        source="search-holdout",
        split="held-out",
        task=str(task.get("name") or "unknown"),
        positions=positions,
        variants=[_variant(name, c) for name, c in configs.items()],
        metrics=metrics,
        reference="base" if "base" in configs else None,
        records=holdout.get("records"),
        samples=samples,
        task_options={"pairs": task["pairs"]} if task.get("pairs") else {},
        notes=notes,
        position_labels=dict(task.get("position_labels") or {}),  # several record lengths: "pairs:position"
    )


def _variant(name: str, config: HoldoutConfig) -> TableVariant:
    factors = config.get("factors")
    uniform = finite(config.get("uniform"))
    label = LABELS.get(name, name)
    if name == "best_uniform" and uniform is not None:
        label = f"best uniform ({uniform:g})"
    if name == "found" and config.get("trial") is not None:
        label = f"found (trial {config['trial']})"
    return TableVariant(
        name=name,
        label=label,
        role=ROLES.get(name, "other"),
        factors=[float(f) for f in factors] if isinstance(factors, list) else None,
        uniform=1.0 if name == "base" else uniform,
    )


def _cell(mean: float, n: int | None, proportion: bool) -> Cell:
    return proportion_cell(mean, n) if proportion else Cell(mean=float(mean), n=n)


def _weighted_mean(row: Mapping[str, float], counts: Mapping[str, int]) -> float | None:
    pairs = [(float(m), counts.get(p, 1)) for p, m in row.items() if finite(m) is not None]
    total = sum(n for _, n in pairs)
    return sum(m * n for m, n in pairs) / total if total else None


def _comparison(a: str, b: str, entry: PairedDifferences, confidence: float) -> Comparison:
    by_position = {
        str(p): t_difference(float(d["diff"]), finite(d.get("se")), d.get("n"), confidence)
        for p, d in (entry.get("by_position") or {}).items()
        if finite(d.get("diff")) is not None
    }
    mean = entry.get("mean")
    overall = None
    if isinstance(mean, Mapping) and finite(mean.get("diff")) is not None:
        overall = t_difference(float(mean["diff"]), finite(mean.get("se")), mean.get("n_records"), confidence)
    return Comparison(variant=a, against=b, by_position=by_position, overall=overall)
