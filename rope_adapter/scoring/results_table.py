"""One typed results table: variants x gold positions -> mean, 95 % interval, n, and paired differences.

Both writers of position results produce it, and every reader (the model card, the demo report) reads it:

- ``rope-adapter eval`` (``results.json``, :meth:`ResultsTable.from_eval_results`): every variant it scored,
  metrics ``accuracy`` / ``tf_accuracy`` / ``logprob`` with Wilson or Student-t intervals, and the paired
  differences from the reference variant;
- the search's held-out step (``search_report.json``'s ``holdout``, :meth:`ResultsTable.from_search_holdout`):
  ``base`` / ``best_uniform`` / ``found`` on the held-out records, the search score, teacher-forced accuracy
  (Wilson intervals from the proportions), the whole-answer log-probability and the paired differences with
  their standard errors (t intervals).

:meth:`ResultsTable.write` saves ``results_table.json``; :meth:`ResultsTable.read` reads it back and refuses
another schema. The table never holds a local path: variants are named by label, adapters by their factors.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rope_adapter.errors import LrsError
from rope_adapter.writable import write_text_atomic

from .intervals import CONFIDENCE, difference_from_se, proportion_interval

__all__ = [
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
]

RESULTS_TABLE_NAME = "results_table.json"
SCHEMA = "rope-adapter results table"
SCHEMA_VERSION = 1

METRIC_TITLES = {
    "accuracy": "Greedy accuracy (the benchmark's rule)",
    "tf_accuracy": "Teacher-forced accuracy (every answer token is the argmax: greedy decoding writes the answer)",
    "answer": "Answer score (teacher-forced accuracy of the whole answer, log-probability breaking ties)",
    "logprob": "Gold log-probability (teacher-forced, mean per answer token)",
    "soft": "Soft teacher-forced accuracy (sigmoid of the smallest answer-token logit margin)",
}
PROPORTIONS = ("accuracy", "tf_accuracy")
HOLDOUT_LABELS = {"base": "base (all factors 1)", "best_uniform": "best uniform", "found": "found"}


class ResultsTableError(LrsError):
    """A file that is not a results table of this schema, or a writer output without position results."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Cell:
    """One variant's mean at one gold position (or over all of them), its 95 % interval and sample count."""

    mean: float
    low: float | None = None
    high: float | None = None
    n: int | None = None


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
    task_options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    # ---- lookup
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
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("schema_version")
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
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsTableError(f"malformed results table ({type(exc).__name__}: {exc})") from None

    def write(self, folder: str | os.PathLike[str]) -> Path:
        """Write ``results_table.json`` into ``folder`` (atomically); returns its path."""
        path = Path(folder) / RESULTS_TABLE_NAME
        write_text_atomic(path, json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")
        return path

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ResultsTable:
        """Read ``results_table.json`` (a folder is taken to hold one)."""
        file = Path(path)
        if file.is_dir():
            file = file / RESULTS_TABLE_NAME
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ResultsTableError(f"{file}: cannot read it as JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ResultsTableError(f"{file}: expected a JSON object")
        try:
            return cls.from_dict(data)
        except ResultsTableError as exc:
            raise ResultsTableError(f"{file}: {exc}") from None

    # ---- writers' outputs
    @classmethod
    def from_eval_results(cls, data: Mapping[str, Any]) -> ResultsTable:
        """The table of a ``rope-adapter eval`` position sweep (the dict results.json holds)."""
        if data.get("kind") != "positions" or not isinstance(data.get("summary"), dict):
            raise ResultsTableError(
                f"results.json of kind {data.get('kind')!r} has no position summary (a position sweep has kind "
                "'positions')"
            )
        positions = [int(p) for p in data["positions"]]
        reference = data.get("reference")
        variants = [_eval_variant(v) for v in data["variants"]]
        metrics = []
        for metric in data["metrics"]:
            cells = {
                name: {p: _cell(c) for p, c in entry[metric]["by_position"].items()}
                for name, entry in data["summary"].items()
                if metric in entry
            }
            overall = {
                name: _cell(entry[metric]["overall"]) for name, entry in data["summary"].items() if metric in entry
            }
            comparisons = [
                Comparison(
                    variant=name,
                    against=str(reference),
                    by_position={p: _diff(d) for p, d in entry[metric]["by_position"].items()},
                    overall=_diff(entry[metric]["overall"]),
                )
                for name, entry in (data.get("comparisons") or {}).items()
                if metric in entry
            ]
            metrics.append(
                MetricTable(
                    name=metric,
                    title=METRIC_TITLES.get(metric, metric),
                    higher_is_better=True,
                    interval="wilson" if metric in PROPORTIONS else "student-t",
                    cells=cells,
                    overall=overall,
                    comparisons=comparisons,
                )
            )
        settings = data.get("settings") or {}
        task_settings = settings.get("task_settings") or {}
        options = {k: task_settings[k] for k in ("num_pairs", "num_docs") if task_settings.get(k) is not None}
        return cls(
            source="eval",
            split="held-out"
            if settings.get("held_out_after") or "--held-out-after" in str(settings.get("command"))
            else "evaluation",
            task=str(data["task"]),
            positions=positions,
            variants=variants,
            metrics=metrics,
            reference=reference,
            confidence=float(data.get("confidence", CONFIDENCE)),
            records=settings.get("num_records"),
            samples=settings.get("num_samples"),
            task_options=options,
        )

    @classmethod
    def from_search_holdout(cls, report: Mapping[str, Any]) -> ResultsTable:
        """The held-out comparison of a search report (the dict search_report.json holds)."""
        holdout = report.get("holdout")
        if not isinstance(holdout, Mapping) or not holdout.get("configs"):
            raise ResultsTableError("the search report has no held-out comparison (the search ran without one)")
        configs: Mapping[str, Mapping[str, Any]] = holdout["configs"]
        task = report.get("task") or {}
        positions = sorted({int(p) for c in configs.values() for p in c.get("by_position", {})})
        counts = {str(p): int(n) for p, n in (holdout.get("samples_per_position") or {}).items()}
        samples = holdout.get("samples")
        variants = [_holdout_variant(name, c) for name, c in configs.items()]
        score = str(holdout.get("score") or task.get("score") or "score")
        score_name = f"{score}@{holdout['k']}" if holdout.get("k") else score
        metrics = []
        # (metric, per-position key, overall key, difference key): the order a reader sees them in
        layout = [
            ("tf_accuracy", "tf_accuracy_by_position", "tf_accuracy", "tf_accuracy"),
            ("accuracy", "accuracy_by_position", None, "accuracy"),
            (score_name, "by_position", "mean", None),
            ("logprob", "mean_logprob_all_answer_tokens", None, "whole_answer"),
        ]
        for name, key, overall_key, diff_key in layout:
            if name == "logprob" and score_name == "logprob":
                continue  # the score is the whole-answer log-prob already
            present = {c: v[key] for c, v in configs.items() if isinstance(v.get(key), Mapping)}
            if not present:
                continue
            proportion = name in PROPORTIONS
            cells = {
                c: {p: _holdout_cell(m, counts.get(p), proportion) for p, m in row.items() if _number(m) is not None}
                for c, row in present.items()
            }
            overall = {}
            for c, row in present.items():
                value = _number(configs[c].get(overall_key)) if overall_key else None
                if value is None:
                    value = _weighted_mean(row, counts)
                if value is not None:
                    overall[c] = _holdout_cell(value, samples, proportion)
            comparisons = []
            for pair, d in (holdout.get("differences") or {}).items():
                entry = d if diff_key is None else d.get(diff_key)
                if not isinstance(entry, Mapping) or "-" not in pair:
                    continue
                a, b = pair.split("-", 1)
                comparisons.append(_holdout_comparison(a, b, entry, CONFIDENCE))
            metrics.append(
                MetricTable(
                    name=name,
                    title=METRIC_TITLES.get(name.split("@")[0], name)
                    + (f", first {holdout['k']} tokens" if name.startswith("logprob@") else ""),
                    higher_is_better=True,
                    interval="wilson" if proportion else None,
                    cells=cells,
                    overall=overall,
                    comparisons=comparisons,
                )
            )
        notes = []
        if holdout.get("verdict"):
            notes.append(str(holdout["verdict"]))
        options = {"pairs": task["pairs"]} if task.get("pairs") else {}
        return cls(
            source="search-holdout",
            split="held-out",
            task=str(task.get("name") or "unknown"),
            positions=positions,
            variants=variants,
            metrics=metrics,
            reference="base" if "base" in configs else None,
            records=holdout.get("records"),
            samples=samples,
            task_options=options,
            notes=notes,
        )


# ---------------------------------------------------------------------------------------------------- helpers


def _cell(entry: Mapping[str, Any]) -> Cell:
    return Cell(
        mean=float(entry["mean"]),
        low=_number(entry.get("ci_low")),
        high=_number(entry.get("ci_high")),
        n=entry.get("n"),
    )


def _diff(entry: Mapping[str, Any]) -> Diff:
    return Diff(
        diff=float(entry["diff"]),
        low=_number(entry.get("ci_low")),
        high=_number(entry.get("ci_high")),
        n=entry.get("n"),
        verdict=str(entry.get("verdict") or "n/a"),
    )


def _eval_variant(entry: Mapping[str, Any]) -> TableVariant:
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
        uniform=_number(entry.get("uniform")),
    )


def _holdout_variant(name: str, config: Mapping[str, Any]) -> TableVariant:
    factors = config.get("factors")
    uniform = _number(config.get("uniform"))
    label = HOLDOUT_LABELS.get(name, name)
    if name == "best_uniform" and uniform is not None:
        label = f"best uniform ({uniform:g})"
    if name == "found" and config.get("trial") is not None:
        label = f"found (trial {config['trial']})"
    role = {"base": "base", "best_uniform": "uniform", "found": "found"}.get(name, "other")
    return TableVariant(
        name=name,
        label=label,
        role=role,
        factors=[float(f) for f in factors] if isinstance(factors, list) else None,
        uniform=1.0 if name == "base" else uniform,
    )


def _holdout_cell(mean: float, n: int | None, proportion: bool) -> Cell:
    if proportion and n:
        successes = round(float(mean) * n)
        interval = proportion_interval([1.0] * successes + [0.0] * (n - successes))
        return Cell(mean=float(mean), low=interval.low, high=interval.high, n=n)
    return Cell(mean=float(mean), n=n)


def _weighted_mean(row: Mapping[str, Any], counts: Mapping[str, int]) -> float | None:
    pairs = [(float(m), counts.get(p, 1)) for p, m in row.items() if _number(m) is not None]
    total = sum(n for _, n in pairs)
    return sum(m * n for m, n in pairs) / total if total else None


def t_difference(diff: float, se: float | None, n: int | None, confidence: float = CONFIDENCE) -> Diff:
    """A difference with its standard error as a :class:`Diff`, by the project's one rule
    (:func:`rope_adapter.scoring.intervals.difference_from_se`)."""
    d = difference_from_se(diff, se, n, confidence=confidence)
    return Diff(diff=d.mean, low=d.low, high=d.high, n=n, verdict=d.verdict)


def _holdout_comparison(a: str, b: str, entry: Mapping[str, Any], confidence: float) -> Comparison:
    by_position = {
        str(p): t_difference(float(d["diff"]), _number(d.get("se")), d.get("n"), confidence)
        for p, d in (entry.get("by_position") or {}).items()
        if _number(d.get("diff")) is not None
    }
    mean = entry.get("mean")
    overall = None
    if isinstance(mean, Mapping) and _number(mean.get("diff")) is not None:
        overall = t_difference(float(mean["diff"]), _number(mean.get("se")), mean.get("n_records"), confidence)
    return Comparison(variant=a, against=b, by_position=by_position, overall=overall)
