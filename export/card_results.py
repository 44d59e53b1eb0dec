"""The results tables of a model card: each :class:`~rope_adapter.scoring.results_table.ResultsTable` of the folder
as the card's template shows it (:func:`table_context`) and as the Hub's ``model-index`` lists it
(:func:`eval_results`), with the number formatting the whole card shares (:func:`fmt_value`, :func:`readable`).
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from huggingface_hub import EvalResult

from rope_adapter.scoring.metrics import PROPORTIONS
from rope_adapter.scoring.numbers import fmt
from rope_adapter.scoring.results_table import Cell, Diff, MetricTable, ResultsTable
from rope_adapter.scoring.tasks import display_name

from .card_data import public_text

# ---------------------------------------------------------------------------------------------------- formatting


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def fmt_value(value: Any, digits: int = 4, sign: bool = False) -> str:
    """A number as the card shows it ("–" when it is not a finite number)."""
    return fmt(finite_number(value), digits, sign=sign)


def readable(value: Any) -> str:
    """A value as people read it: numbers to 4 significant digits, lists joined, objects as ``key: value``."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return ", ".join(readable(v) for v in value) if value else "–"
    if isinstance(value, dict):
        return "; ".join(f"{str(k).replace('_', ' ')} {readable(v)}" for k, v in value.items()) if value else "–"
    return public_text(str(value))


# ---------------------------------------------------------------------------------------------------- results


def _digits(metric: MetricTable) -> int:
    return 3 if metric.name in PROPORTIONS else 4


def _cell(cell: Cell | None, digits: int) -> str:
    if cell is None:
        return "–"
    if cell.low is None or cell.high is None:
        return fmt_value(cell.mean, digits)
    return f"{fmt_value(cell.mean, digits)} [{fmt_value(cell.low, digits)}, {fmt_value(cell.high, digits)}]"


def _diff(diff: Diff | None, digits: int) -> str:
    if diff is None:
        return "–"
    if diff.low is None or diff.high is None:
        return f"{fmt_value(diff.diff, digits, True)} ({diff.verdict})"
    return (
        f"{fmt_value(diff.diff, digits, True)} [{fmt_value(diff.low, digits, True)}, {fmt_value(diff.high, digits, True)}] "
        f"{diff.verdict}"
    )


def _dataset(table: ResultsTable) -> str:
    name = display_name(table.task)
    pairs = table.task_options.get("pairs") or table.task_options.get("num_pairs")
    docs = table.task_options.get("num_docs")
    detail = f", {readable(pairs)} pairs" if pairs else (f", {docs} documents" if docs else "")
    records = "held-out records of the search" if table.source == "search-holdout" else "records of `rope-adapter eval`"
    return f"Lost in the Middle {name}{detail} ({records})"


class RowContext(TypedDict):
    """One variant's row of a results table on the card."""

    label: str
    this: bool  # the variant whose factors are this folder's
    cells: list[str]  # per gold position
    overall: str


class DiffContext(TypedDict):
    label: str  # "variant − against"
    cells: list[str]
    overall: str


class MetricContext(TypedDict):
    title: str
    rows: list[RowContext]
    diffs: list[DiffContext]
    interval: str | None


class TableContext(TypedDict):
    """What the card's template shows of one results table."""

    title: str
    source: str  # the file the table came from
    dataset: str
    count: str  # "N records, M samples"
    positions: list[str]  # as shown: the writer's labels ("50:12" for several record lengths)
    labelled: bool  # the positions are "pairs:position" labels of a study over several record lengths
    metrics: list[MetricContext]
    this_label: str | None
    what: str  # "adapter" or "model"
    notes: list[str]
    unmatched: bool  # no variant of the table has this folder's factors


def table_context(source: str, table: ResultsTable, this: str | None, kind: str) -> TableContext:
    """What the template shows of ``table`` (read from the file ``source``); ``this`` is the variant whose factors
    are the folder's (None: none of them), ``kind`` "adapter" or "model"."""
    positions = [str(p) for p in table.positions]
    labels = {v.name: v.label for v in table.variants}
    metrics: list[MetricContext] = []
    for metric in table.metrics:
        digits = _digits(metric)
        rows = [
            {
                "label": labels.get(v.name, v.name),
                "this": v.name == this,
                "cells": [_cell(metric.cells.get(v.name, {}).get(p), digits) for p in positions],
                "overall": _cell(metric.overall.get(v.name), digits),
            }
            for v in table.variants
            if v.name in metric.cells
        ]
        diffs = [
            {
                "label": f"{labels.get(c.variant, c.variant)} − {labels.get(c.against, c.against)}",
                "cells": [_diff(c.by_position.get(p), digits) for p in positions],
                "overall": _diff(c.overall, digits),
            }
            for c in metric.comparisons
        ]
        interval = {"wilson": "Wilson 95 % interval", "student-t": "Student-t 95 % interval"}.get(metric.interval or "")
        metrics.append({"title": metric.title, "rows": rows, "diffs": diffs, "interval": interval})
    held_out = table.source == "search-holdout"
    count = ", ".join(
        x
        for x in (
            f"{table.records} records" if table.records else "",
            f"{table.samples} samples" if table.samples else "",
        )
        if x
    )
    return {
        "title": "Held-out results of the search" if held_out else "Evaluation (`rope-adapter eval`)",
        "source": source,
        "dataset": _dataset(table),
        "count": count,
        "positions": [table.position_label(p) for p in positions],
        "labelled": bool(table.position_labels),
        "metrics": metrics,
        "this_label": labels.get(this) if this else None,
        "what": "adapter" if kind == "adapter" else "model",
        "notes": [public_text(n) for n in table.notes],
        "unmatched": this is None,
    }


def eval_results(table: ResultsTable, this: str | None) -> list[EvalResult]:
    """The ``model-index`` entries of variant ``this`` (overall and per gold position); none when it is None."""
    if this is None:
        return []
    common = {
        "task_type": "text-generation",
        "dataset_type": "lost-in-the-middle",
        "dataset_name": _dataset(table),
        "dataset_config": table.task,
        "dataset_split": table.split,
    }
    out = []
    for metric in table.metrics:
        overall = metric.overall.get(this)
        if overall is not None and finite_number(overall.mean) is not None:
            out.append(
                EvalResult(
                    metric_type=metric.name,
                    metric_name=f"{metric.name} (all gold positions)",
                    metric_value=overall.mean,
                    **common,
                )
            )
        for pos in table.positions:
            cell = metric.cells.get(this, {}).get(str(pos))
            label = table.position_label(pos)  # "50:12" (50 pairs, gold position 12) in a study of several lengths
            if cell is not None and finite_number(cell.mean) is not None:
                out.append(
                    EvalResult(
                        metric_type=f"{metric.name}@position_{label}",
                        metric_name=f"{metric.name} at gold position {label}",
                        metric_value=cell.mean,
                        **common,
                    )
                )
    return out
