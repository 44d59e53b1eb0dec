"""What the evaluation's result sweeps share: ``results.json``'s layout and writing it with its Markdown and
figure (and, for the position sweep, the results record the model card reads: inside results.json and as
``results_table.json``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rope_adapter import files
from rope_adapter.scoring.results_table import RECORD_KEY, ResultsTable


class SweepResults:
    """What the position sweep (:class:`PositionResults`) and the length sweep
    (:class:`~rope_adapter.evaluate.extrapolation.LengthResults`) share: variant names, ``results.json``'s layout,
    and writing it with its Markdown and figure. Subclasses are dataclasses with ``variants``, ``rows``,
    ``reference``, ``settings`` and ``confidence``."""

    KIND = ""
    ROWS_KEY = "rows"
    FIGURE = "figure.png"
    variants: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    reference: str
    settings: dict[str, Any]
    confidence: float

    @property
    def variant_names(self) -> list[str]:
        return [v["name"] for v in self.variants]

    def head(self) -> dict[str, Any]:
        """The sweep's own leading keys of results.json (task, what was swept)."""
        raise NotImplementedError

    def renderers(self) -> tuple[Callable[..., Path], Callable[..., str]]:
        """(figure function, Markdown function) of this sweep."""
        raise NotImplementedError

    def summary(self) -> dict[str, dict[str, Any]]:
        raise NotImplementedError

    def comparisons(self) -> dict[str, dict[str, Any]]:
        raise NotImplementedError

    def record(self, data: Mapping[str, Any]) -> ResultsTable | None:
        """The results record this sweep's writer builds from ``data`` (results.json without its rows); None for
        a sweep without one."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """What results.json holds (with the sweep's results record under ``RECORD_KEY``, when it has one)."""
        data: dict[str, Any] = {
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


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    files.write_json(path, data)


def write_results(
    out_dir: str | os.PathLike[str],
    data: Mapping[str, Any],
    plot_fn: Callable[[Mapping[str, Any], Path], Path],
    markdown_fn: Callable[..., str],
    plot_name: str,
    plot: bool = True,
) -> dict[str, Path]:
    """Write ``data`` as results.json, its Markdown as results.md, (with ``plot``) its figure ``plot_name`` and
    the results record it carries as results_table.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    _write_json(paths["json"], data)
    if plot:
        paths["plot"] = plot_fn(data, out / plot_name)
    files.write_text(paths["markdown"], markdown_fn(data, plot_name=plot_name if plot else None))
    table = ResultsTable.embedded_in(data)  # the record the model card and the demo report read
    if table is not None:
        paths["table"] = table.write(out)
    return paths
