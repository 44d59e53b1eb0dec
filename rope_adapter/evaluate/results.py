"""What the evaluation's result sweeps share: ``results.json``'s layout (one typed definition that the sweeps write
and every reader, the Markdown, the plots and the results record, reads) and writing it with its Markdown and
figure (and, for the position sweep, the results record the model card reads: inside results.json and as
``results_table.json``)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, TypedDict, TypeVar

import peft
import torch
import transformers

import rope_adapter
from rope_adapter import files
from rope_adapter.json_types import JsonObject, JsonValue
from rope_adapter.scoring.intervals import CONFIDENCE, DifferenceEntry, IntervalEntry
from rope_adapter.scoring.results_table import RECORD_KEY, ResultsTable
from rope_adapter.scoring.variants import BuiltVariant, Variant, VariantSpec

# ---------------------------------------------------------------------------------------------- results.json


class Environment(TypedDict):
    """Versions and machine (:func:`environment`)."""

    rope_adapter: str
    torch: str
    transformers: str
    peft: str
    python: str
    machine: str
    torch_threads: int
    date: str  # "%Y-%m-%d %H:%M:%S %z"


class EvaluatedVariant(VariantSpec, BuiltVariant):
    """A variant as results.json lists it: its spec, what its built model has, and the seconds it took."""

    seconds: float


class RunSettings(TypedDict, total=False):
    """The run's own entries of the settings: what ``rope-adapter eval`` records (``evaluate.run``); a Python
    caller passes its own (``settings=``), and readers show what is there."""

    model: str
    model_path: str
    model_type: str | None
    num_layers: int | None
    dtype: str
    device: str
    seed: int
    command: str  # the command line that reproduces the run
    task_settings: dict[str, JsonValue]  # position sweeps: the task's fields
    held_out_after: int
    data_path: str  # length sweeps: the text
    stride: int | None
    # position sweeps, what `rope-adapter compare` checks before pooling (older files lack them):
    model_identity: JsonValue  # the weights by what they hold (rope_adapter.identity.model_identity)
    data_identity: JsonValue  # the data file by name and sha256, when the records come from one
    tokenizer: JsonValue  # --tokenizer by what it holds, or None (the model's own)
    system_prompt: str | None
    max_new_tokens_option: int | None  # --max-new-tokens as given (None: the longest answer + slack)


class PromptTokens(TypedDict):
    min: int
    max: int


class _PositionSettingsRequired(TypedDict):
    num_samples: int
    num_records: int
    chat_template: bool
    logprob_tokens: int | None
    batch_size: int
    max_batch_tokens: int
    prompt_tokens: PromptTokens
    max_new_tokens: int
    environment: Environment


class PositionSettings(_PositionSettingsRequired, RunSettings, total=False):
    """A position sweep's settings."""

    max_position_embeddings: int | None


class _LengthSettingsRequired(TypedDict):
    num_windows: int
    windows_by_length: dict[str, int]
    chunk_tokens: int
    batch_size: int
    max_batch_tokens: int
    max_position_embeddings: int | None
    environment: Environment


class LengthSettings(_LengthSettingsRequired, RunSettings, total=False):
    """A length sweep's settings."""


class _SampleRowRequired(TypedDict):
    variant: str
    sample: int
    record_id: str
    position: int


class SampleRow(_SampleRowRequired, total=False):
    """One sample's scores for one variant (the metrics the sweep computed)."""

    accuracy: float
    tf_accuracy: float
    logprob: float
    prediction: str  # the greedy answer (with the accuracy score)


class WindowRow(TypedDict):
    """One window's log-likelihood for one variant."""

    variant: str
    length: int
    window: int
    tokens: int
    loglik: float  # mean per scored token, nats
    perplexity: float


class MetricSummary(TypedDict):
    """One variant's metric: per gold position and over all of them."""

    by_position: dict[str, IntervalEntry]
    overall: IntervalEntry


class MetricComparison(TypedDict):
    """One variant's paired difference from the reference in one metric."""

    by_position: dict[str, DifferenceEntry]
    overall: DifferenceEntry


class Perplexity(TypedDict):
    """Token-weighted perplexity at one length, with its interval from the spread of the windows."""

    perplexity: float
    ci_low: float | None
    ci_high: float | None
    loglik: float
    windows: int
    tokens: int


class LengthSummary(TypedDict):
    by_length: dict[str, Perplexity]


class _PositionFileRequired(TypedDict):
    kind: Literal["positions"]
    task: str
    metrics: list[str]
    positions: list[int]
    confidence: float
    reference: str
    settings: PositionSettings
    variants: list[EvaluatedVariant]
    summary: dict[str, dict[str, MetricSummary]]  # variant -> metric -> summary
    comparisons: dict[str, dict[str, MetricComparison]]  # variant -> metric -> difference from the reference
    samples: list[SampleRow]


class PositionResultsFile(_PositionFileRequired, total=False):
    """results.json of a position sweep."""

    results_table: JsonObject  # ResultsTable.to_dict(): always written; older files lack it


class LengthResultsFile(TypedDict):
    """results.json of a length sweep."""

    kind: Literal["lengths"]
    task: Literal["perplexity"]
    lengths: list[int]
    confidence: float
    reference: str
    settings: LengthSettings
    variants: list[EvaluatedVariant]
    summary: dict[str, LengthSummary]  # variant -> by length
    comparisons: dict[str, dict[str, DifferenceEntry]]  # variant -> length -> per-window log-likelihood difference
    windows: list[WindowRow]


ResultsFile = PositionResultsFile | LengthResultsFile
"""What results.json holds, by its ``kind``."""

ResultsKind = Literal["positions", "lengths"]
RESULTS_FILES: dict[str, type] = {"positions": PositionResultsFile, "lengths": LengthResultsFile}
"""``kind`` -> the record of its results.json."""


def environment() -> Environment:
    """Versions and machine, recorded in results.json."""
    return {
        "rope_adapter": rope_adapter.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def evaluated_variant(variant: Variant, built: BuiltVariant, seconds: float) -> EvaluatedVariant:
    """A variant's entry of results.json: its spec, what its built model has (``describe_variant``), its time."""
    return {**variant.to_dict(), **built, "seconds": round(seconds, 3)}


# ---------------------------------------------------------------------------------------------- the sweeps

RowT = TypeVar("RowT", SampleRow, WindowRow)
SettingsT = TypeVar("SettingsT", PositionSettings, LengthSettings)


@dataclass(kw_only=True)
class SweepResults(Generic[RowT, SettingsT]):
    """What the position sweep (:class:`~rope_adapter.evaluate.evaluation.PositionResults`) and the length sweep
    (:class:`~rope_adapter.evaluate.extrapolation.LengthResults`) share: variants, rows, reference, settings,
    results.json's layout, and writing it with its Markdown and figure."""

    KIND = ""
    ROWS_KEY = "rows"
    FIGURE = "figure.png"

    variants: list[EvaluatedVariant]
    rows: list[RowT] = field(repr=False)
    reference: str = ""
    settings: SettingsT = field(default_factory=dict)
    confidence: float = CONFIDENCE

    @property
    def variant_names(self) -> list[str]:
        return [v["name"] for v in self.variants]

    def head(self) -> JsonObject:
        """The sweep's own leading keys of results.json (task, what was swept)."""
        raise NotImplementedError

    def renderers(self) -> tuple[Callable[..., Path], Callable[..., str]]:
        """(figure function, Markdown function) of this sweep."""
        raise NotImplementedError

    def summary(self) -> dict[str, dict[str, MetricSummary]] | dict[str, LengthSummary]:
        raise NotImplementedError

    def comparisons(self) -> dict[str, dict[str, MetricComparison]] | dict[str, dict[str, DifferenceEntry]]:
        raise NotImplementedError

    def record(self, data: ResultsFile) -> ResultsTable | None:
        """The results record this sweep's writer builds from ``data`` (results.json without its rows); None for
        a sweep without one."""
        return None

    def to_dict(self) -> ResultsFile:
        """What results.json holds (with the sweep's results record under ``RECORD_KEY``, when it has one)."""
        data = {
            "kind": self.KIND,
            **self.head(),
            "confidence": self.confidence,
            "reference": self.reference,
            "settings": self.settings,
            "variants": self.variants,
            "summary": self.summary(),
            "comparisons": self.comparisons(),
        }
        record = self.record(data)
        if record is not None:
            data[RECORD_KEY] = record.to_dict()
        data[self.ROWS_KEY] = self.rows
        return data

    def write(self, out_dir: str | os.PathLike[str], *, plot: bool = True) -> dict[str, Path]:
        """Write results.json, results.md and (with ``plot``) the sweep's figure into ``out_dir``."""
        plot_fn, markdown_fn = self.renderers()
        return write_results(out_dir, self.to_dict(), plot_fn, markdown_fn, self.FIGURE, plot)


def write_results(
    out_dir: str | os.PathLike[str],
    data: ResultsFile,
    plot_fn: Callable[[ResultsFile, Path], Path],
    markdown_fn: Callable[..., str],
    plot_name: str,
    plot: bool = True,
) -> dict[str, Path]:
    """Write ``data`` as results.json, its Markdown as results.md, (with ``plot``) its figure ``plot_name`` and
    the results record it carries as results_table.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    files.write_json(paths["json"], data)
    if plot:
        paths["plot"] = plot_fn(data, out / plot_name)
    files.write_text(paths["markdown"], markdown_fn(data, plot_name=plot_name if plot else None))
    table = ResultsTable.embedded_in(data)  # the record the model card and the demo report read
    if table is not None:
        paths["table"] = table.write(out)
    return paths
