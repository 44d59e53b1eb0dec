"""One typed results table: variants x gold positions -> mean, 95 % interval, n, and paired differences.

The shared results record: each writer of position results builds it from its own data, and every reader (the
model card, the demo report) reads only it:

- ``rope-adapter eval``: :func:`rope_adapter.evaluate.results_record.position_table` (every variant it scored,
  metrics ``accuracy`` / ``tf_accuracy`` / ``logprob`` with Wilson or Student-t intervals, the paired
  differences from the reference variant); results.json carries it under :data:`RECORD_KEY`;
- the search's held-out step: :func:`rope_adapter.search.results_record.holdout_table` (``base`` /
  ``best_uniform`` / ``found`` on the held-out records, the search score, teacher-forced accuracy with Wilson
  intervals from the proportions, the whole-answer log-probability, the paired differences with t intervals
  from their standard errors).

Titles come from the one metric table, :data:`rope_adapter.scoring.metrics.METRIC_TABLE`.
:meth:`ResultsTable.write` saves ``results_table.json``; :meth:`ResultsTable.read` reads it back and refuses
another schema. The table never holds a local path: variants are named by label, adapters by their factors.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rope_adapter import files
from rope_adapter.errors import LrsError, RecordFileError
from rope_adapter.json_types import JsonObject
from rope_adapter.records import read_json

from .intervals import CONFIDENCE, difference_from_se, proportion_interval

__all__ = [
    "RECORD_KEY",
    "RESULTS_TABLE_NAME",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Cell",
    "Comparison",
    "Diff",
    "MetricTable",
    "ResultsTable",
    "ResultsTableError",
    "TableVariant",
    "difference_diff",
    "finite",
    "interval_cell",
    "proportion_cell",
    "t_difference",
]

RESULTS_TABLE_NAME = "results_table.json"
SCHEMA = "rope-adapter results table"
SCHEMA_VERSION = 1

RECORD_KEY = "results_table"
"""The key under which a writer's own JSON (``rope-adapter eval``'s results.json) carries this table."""


class ResultsTableError(LrsError):
    """A file that is not a results table of this schema, or a writer output without position results."""


@dataclass(frozen=True)
class Cell:
    """One variant's mean at one gold position (or over all of them), its 95 % interval and sample count."""

    mean: float
    low: float | None = None
    high: float | None = None
    n: int | None = None


# Kept apart from Cell: a mean and a paired difference are different records with their own JSON keys (``mean``;
# ``diff`` and ``verdict``); a shared base would have to put the interval before the value.
@dataclass(frozen=True)
class Diff:
    """A paired difference ``variant - against`` with its interval, sample count and verdict."""

    diff: float
    low: float | None = None
    high: float | None = None
    n: int | None = None
    verdict: str = "n/a"


@dataclass(frozen=True)
class Comparison:
    """Paired differences of one variant from another, by gold position and over all positions."""

    variant: str
    against: str
    by_position: dict[str, Diff]
    overall: Diff | None = None


@dataclass(frozen=True)
class TableVariant:
    """A scored configuration: its label, role (base / uniform / found / adapter / other) and factors."""

    name: str
    label: str
    role: str = "other"
    factors: list[float] | None = None
    uniform: float | None = None


@dataclass(frozen=True)
class MetricTable:
    """One metric: ``cells[variant][position]``, ``overall[variant]`` and the paired comparisons."""

    name: str
    title: str
    higher_is_better: bool
    interval: str | None  # "wilson", "student-t", or None when the writer kept no per-sample spread
    cells: dict[str, dict[str, Cell]]
    overall: dict[str, Cell] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)


@dataclass
class ResultsTable:
    """Variants x gold positions for one or more metrics, from one writer (see the module docstring)."""

    source: str  # "eval" or "search-holdout"
    split: str  # "held-out" (records the search never scored) or "test"
    task: str
    positions: list[int]
    variants: list[TableVariant]
    metrics: list[MetricTable]
    reference: str | None = None
    confidence: float = CONFIDENCE
    records: int | None = None
    samples: int | None = None
    task_options: dict[str, Any] = field(default_factory=dict)  # the task's own settings by name: an open mapping
    notes: list[str] = field(default_factory=list)
    position_labels: dict[str, str] = field(default_factory=dict)  # several record lengths: key -> "pairs:position"
    schema_version: int = SCHEMA_VERSION

    # ---- lookup
    def position_label(self, position: int | str) -> str:
        """How a reader shows a gold position: its label where the writer gave one (a study over several record
        lengths keys its positions by length, ``"50:12"``: 50 pairs, gold position 12), else the position."""
        return self.position_labels.get(str(position), str(position))

    def metric(self, name: str) -> MetricTable | None:
        return next((m for m in self.metrics if m.name == name), None)

    def variant(self, name: str) -> TableVariant | None:
        return next((v for v in self.variants if v.name == name), None)

    def variant_with_factors(self, factors: Sequence[float], rel_tol: float = 1e-6) -> TableVariant | None:
        """The variant scored with exactly these factors (float32 rounding allowed), preferring a found one."""
        matches = [
            v
            for v in self.variants
            if v.factors is not None
            and len(v.factors) == len(factors)
            and all(math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-7) for a, b in zip(v.factors, factors, strict=True))
        ]
        matches.sort(key=lambda v: v.role not in ("found", "adapter"))
        return matches[0] if matches else None

    # ---- (de)serialisation
    def to_dict(self) -> JsonObject:
        """The table as ``results_table.json`` holds it (what :meth:`from_dict` reads)."""
        data = asdict(self)
        data.pop("schema_version")
        if not self.position_labels:
            data.pop("position_labels")  # a table of one record length is written as before
        return {"schema": SCHEMA, "schema_version": self.schema_version, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultsTable:
        if data.get("schema") != SCHEMA:
            raise ResultsTableError(f"not a {SCHEMA!r} (schema {data.get('schema')!r})")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ResultsTableError(
                f"results table schema version {version!r}, this rope-adapter reads version {SCHEMA_VERSION}: "
                "rewrite it with this version (rerun the search's report or the eval) or upgrade rope-adapter"
            )
        try:
            metrics = [
                MetricTable(
                    name=m["name"],
                    title=m["title"],
                    higher_is_better=bool(m["higher_is_better"]),
                    interval=m.get("interval"),
                    cells={v: {p: Cell(**c) for p, c in row.items()} for v, row in m["cells"].items()},
                    overall={v: Cell(**c) for v, c in (m.get("overall") or {}).items()},
                    comparisons=[
                        Comparison(
                            variant=c["variant"],
                            against=c["against"],
                            by_position={p: Diff(**d) for p, d in c["by_position"].items()},
                            overall=Diff(**c["overall"]) if c.get("overall") else None,
                        )
                        for c in m.get("comparisons") or []
                    ],
                )
                for m in data["metrics"]
            ]
            return cls(
                source=str(data["source"]),
                split=str(data["split"]),
                task=str(data["task"]),
                positions=[int(p) for p in data["positions"]],
                variants=[TableVariant(**v) for v in data["variants"]],
                metrics=metrics,
                reference=data.get("reference"),
                confidence=float(data.get("confidence", CONFIDENCE)),
                records=data.get("records"),
                samples=data.get("samples"),
                task_options=dict(data.get("task_options") or {}),
                notes=list(data.get("notes") or []),
                position_labels={str(k): str(v) for k, v in (data.get("position_labels") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsTableError(f"malformed results table ({type(exc).__name__}: {exc})") from None

    def write(self, folder: str | os.PathLike[str]) -> Path:
        """Write ``results_table.json`` into ``folder`` (atomically); returns its path."""
        path = Path(folder) / RESULTS_TABLE_NAME
        files.write_json(path, self.to_dict())
        return path

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ResultsTable:
        """Read ``results_table.json`` (a folder is taken to hold one)."""
        file = Path(path)
        if file.is_dir():
            file = file / RESULTS_TABLE_NAME
        try:
            data = read_json(file, JsonObject)
        except RecordFileError as exc:
            raise ResultsTableError(str(exc)) from None
        try:
            return cls.from_dict(data)
        except ResultsTableError as exc:
            raise ResultsTableError(f"{file}: {exc}") from None

    @classmethod
    def embedded_in(cls, data: Mapping[str, Any]) -> ResultsTable | None:
        """The table a writer's own JSON carries under :data:`RECORD_KEY` (``rope-adapter eval``'s results.json),
        None when it carries none; a reader needs no other key of that file."""
        record = data.get(RECORD_KEY)
        if record is None:
            return None
        if not isinstance(record, Mapping):
            raise ResultsTableError(f"{RECORD_KEY!r} is not a JSON object")
        return cls.from_dict(record)


# ---------------------------------------------------------------------------------------------------- helpers
# for the writers' builders: the scoring layer's own shapes (Interval.to_dict, Difference.to_dict) as cells


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def interval_cell(entry: Mapping[str, Any]) -> Cell:
    """A :class:`Cell` of an :class:`~rope_adapter.scoring.intervals.Interval`'s ``to_dict()``."""
    return Cell(
        mean=float(entry["mean"]),
        low=finite(entry.get("ci_low")),
        high=finite(entry.get("ci_high")),
        n=entry.get("n"),
    )


def difference_diff(entry: Mapping[str, Any]) -> Diff:
    """A :class:`Diff` of a :class:`~rope_adapter.scoring.intervals.Difference`'s ``to_dict()``."""
    return Diff(
        diff=float(entry["diff"]),
        low=finite(entry.get("ci_low")),
        high=finite(entry.get("ci_high")),
        n=entry.get("n"),
        verdict=str(entry.get("verdict") or "n/a"),
    )


def proportion_cell(mean: float, n: int | None) -> Cell:
    """A proportion over ``n`` samples with its Wilson interval (the mean alone without a count)."""
    if n:
        successes = round(float(mean) * n)
        interval = proportion_interval([1.0] * successes + [0.0] * (n - successes))
        return Cell(mean=float(mean), low=interval.low, high=interval.high, n=n)
    return Cell(mean=float(mean), n=n)


def t_difference(diff: float, se: float | None, n: int | None, confidence: float = CONFIDENCE) -> Diff:
    """A difference with its standard error as a :class:`Diff`, by the project's one rule
    (:func:`rope_adapter.scoring.intervals.difference_from_se`)."""
    d = difference_from_se(diff, se, n, confidence=confidence)
    return Diff(diff=d.mean, low=d.low, high=d.high, n=n, verdict=d.verdict)
