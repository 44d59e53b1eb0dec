"""What the evaluation's result sweeps share: ``results.json``'s layout and writing it with its Markdown and
figure (and, for the position sweep, the typed results table the model card reads)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rope_adapter.writable import write_text_atomic


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

    def to_dict(self) -> dict[str, Any]:
        """What results.json holds."""
        return {
            "kind": self.KIND,
            **self.head(),
            "confidence": self.confidence,
            "reference": self.reference,
            "settings": self.settings,
            "variants": self.variants,
            "summary": self.summary(),
            "comparisons": self.comparisons(),
            self.ROWS_KEY: self.rows,
        }

    def write(self, out_dir: str | os.PathLike[str], *, plot: bool = True) -> dict[str, Path]:
        """Write results.json, results.md and (with ``plot``) the sweep's figure into ``out_dir``."""
        plot_fn, markdown_fn = self.renderers()
        return write_results(out_dir, self.to_dict(), plot_fn, markdown_fn, self.FIGURE, plot)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def write_results(
    out_dir: str | os.PathLike[str],
    data: Mapping[str, Any],
    plot_fn: Callable[[Mapping[str, Any], Path], Path],
    markdown_fn: Callable[..., str],
    plot_name: str,
    plot: bool = True,
) -> dict[str, Path]:
    """Write ``data`` as results.json, its Markdown as results.md and (with ``plot``) its figure ``plot_name``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    _write_json(paths["json"], data)
    if plot:
        paths["plot"] = plot_fn(data, out / plot_name)
    write_text_atomic(paths["markdown"], markdown_fn(data, plot_name=plot_name if plot else None))
    if data.get("kind") == "positions":  # the typed table the model card and the demo report read
        from rope_adapter.scoring.results_table import ResultsTable

        paths["table"] = ResultsTable.from_eval_results(data).write(out)
    return paths
