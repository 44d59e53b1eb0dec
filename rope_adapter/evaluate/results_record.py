"""The results record of a position sweep: ``rope-adapter eval`` builds its
:class:`~rope_adapter.scoring.results_table.ResultsTable` itself, from its own results.json data.

This is the only code that turns results.json's keys into the record. The record travels twice: as
``results_table.json`` next to results.json, and inside results.json under
:data:`~rope_adapter.scoring.results_table.RECORD_KEY`, so that a results.json copied into an adapter or export
folder gives the card its table without the card reading any other key of it. :data:`READS` and
:data:`LEAVES_OUT` name every key of results.json: a test fails when the eval writes one that is in neither.
"""

from __future__ import annotations

from rope_adapter.scoring.intervals import CONFIDENCE
from rope_adapter.scoring.metrics import METRIC_TABLE, PROPORTIONS, metric_title
from rope_adapter.scoring.results_table import (
    Comparison,
    MetricTable,
    ResultsTable,
    ResultsTableError,
    TableVariant,
    difference_diff,
    finite,
    interval_cell,
)

from .results import EvaluatedVariant, PositionResultsFile

READS = frozenset(
    {
        "kind",
        "task",
        "metrics",
        "positions",
        "confidence",
        "reference",
        "settings",
        "variants",
        "summary",
        "comparisons",
    }
)
"""The keys of results.json the record is built from."""
LEAVES_OUT = frozenset({"samples", "results_table"})
"""The keys of results.json the record leaves out: every sample's scores (the record holds their summaries) and
the record itself."""


def position_table(data: PositionResultsFile) -> ResultsTable:
    """The record of a position sweep, from what results.json holds (:meth:`PositionResults.to_dict`)."""
    if data.get("kind") != "positions" or not isinstance(data.get("summary"), dict):
        raise ResultsTableError(
            f"results.json of kind {data.get('kind')!r} has no position summary (a position sweep has kind 'positions')"
        )
    reference = data.get("reference")
    metrics = []
    for metric in data["metrics"]:
        cells = {
            name: {p: interval_cell(c) for p, c in entry[metric]["by_position"].items()}
            for name, entry in data["summary"].items()
            if metric in entry
        }
        overall = {
            name: interval_cell(entry[metric]["overall"]) for name, entry in data["summary"].items() if metric in entry
        }
        comparisons = [
            Comparison(
                variant=name,
                against=str(reference),
                by_position={p: difference_diff(d) for p, d in entry[metric]["by_position"].items()},
                overall=difference_diff(entry[metric]["overall"]),
            )
            for name, entry in (data.get("comparisons") or {}).items()
            if metric in entry
        ]
        metrics.append(
            MetricTable(
                name=metric,
                title=metric_title(metric),
                higher_is_better=METRIC_TABLE[metric]["higher_is_better"] if metric in METRIC_TABLE else True,
                interval="wilson" if metric in PROPORTIONS else "student-t",
                cells=cells,
                overall=overall,
                comparisons=comparisons,
            )
        )
    settings = data.get("settings") or {}
    task_settings = settings.get("task_settings") or {}
    options = {k: task_settings[k] for k in ("num_pairs", "num_docs") if task_settings.get(k) is not None}
    held_out = settings.get("held_out_after") or "--held-out-after" in str(settings.get("command"))
    return ResultsTable(
        source="eval",
        split="held-out" if held_out else "evaluation",
        task=str(data["task"]),
        positions=[int(p) for p in data["positions"]],
        variants=[_variant(v) for v in data["variants"]],
        metrics=metrics,
        reference=reference,
        confidence=float(data.get("confidence", CONFIDENCE)),
        records=settings.get("num_records"),
        samples=settings.get("num_samples"),
        task_options=options,
    )


def _variant(entry: EvaluatedVariant) -> TableVariant:
    name = str(entry["name"])
    spec = str(entry.get("spec") or name)
    if spec == "base":
        role = "base"
    elif entry.get("uniform") is not None:
        role = "uniform"
    elif entry.get("adapter") and "+" not in spec:
        role = "adapter"
    else:
        role = "other"
    factors = entry.get("factors")
    return TableVariant(
        name=name,
        label=name,
        role=role,
        factors=[float(f) for f in factors] if isinstance(factors, list) else None,
        uniform=finite(entry.get("uniform")),
    )
