"""The sensitivity part of ``rope-adapter analyze``: run :func:`layer_sensitivity` at each point, write
``sensitivity.json`` and ``sensitivity.png``, and return the Markdown section of ``analysis.md``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict

from torch import nn

from rope_adapter import files
from rope_adapter.scoring.numbers import fmt, fmt_interval
from rope_adapter.scoring.shared_prefix import TokenizedTask

from .own_outputs import ANALYZE_STAMP
from .plots import plot_sensitivity
from .sensitivity import LayerSlope, SensitivityRecord, layer_sensitivity


class SensitivityPoint(SensitivityRecord):
    """The sensitivity at one point (named: "base", a variant)."""

    name: str


class _SensitivityFileRequired(TypedDict):
    model: str
    num_samples: int
    num_records: int
    interval: str
    points: list[SensitivityPoint]


class SensitivityFile(_SensitivityFileRequired, total=False):
    """sensitivity.json."""

    written_by: str  # own_outputs.ANALYZE_STAMP (always written; files written before the stamp lack it)


def _clear(rows: Sequence[LayerSlope]) -> list[LayerSlope]:
    """The layers whose interval excludes 0."""
    return [r for r in rows if r["ci_low"] is not None and (r["ci_low"] > 0 or r["ci_high"] < 0)]


def _top(rows: Sequence[LayerSlope], n: int = 3) -> str:
    """The ``n`` layers with the largest |mean| whose interval excludes 0, or a plain statement that none does."""
    clear = _clear(rows)
    if not clear:
        return "no layer's interval excludes 0"
    clear.sort(key=lambda r: -abs(r["mean"]))
    return ", ".join(f"layer {r['layer']} ({fmt(r['mean'], sign=True)})" for r in clear[:n])


def sensitivity_section(
    task: TokenizedTask,
    model: Callable[[], nn.Module],
    points: Sequence[tuple[str, list[float] | None]],
    out: Path,
    paths: dict[str, Path],
    log: Callable[[str], None],
    *,
    progress: bool = True,
    model_name: str = "",
) -> list[str]:
    """Sensitivity at each ``(name, factors)`` point (None: the base); ``model()`` loads the model."""
    records = len({s.record_id for s in task.samples})
    log(f"sensitivity d score / d log s_l on {len(task)} samples ({records} records) at {len(points)} point(s)")
    entries: list[SensitivityPoint] = []
    for name, factors in points:
        result = layer_sensitivity(model(), task, factors, progress=progress)
        entries.append({"name": name, **result.to_dict()})
        log(f"  {name:<24} score {result.scores.mean():.4f}; {_top(entries[-1]['by_layer'])}")
    data: SensitivityFile = {
        "written_by": ANALYZE_STAMP,
        "model": model_name,
        "num_samples": len(task),
        "num_records": records,
        "interval": "95 % t interval over records (each record's mean over its gold positions)",
        "points": entries,
    }
    out.mkdir(parents=True, exist_ok=True)
    paths["sensitivity_json"] = out / "sensitivity.json"
    files.write_json(paths["sensitivity_json"], data)
    paths["sensitivity_plot"] = plot_sensitivity(data, out / "sensitivity.png")
    return sensitivity_lines(data)


def sensitivity_lines(data: SensitivityFile) -> list[str]:
    """The Markdown section of ``analysis.md``, from ``sensitivity.json``'s dict alone."""
    entries = data["points"]
    records = data["num_records"]
    layers = len(entries[0]["by_layer"])
    lines = [
        "## Sensitivity to each layer's factor",
        "",
        f"d score / d log s_l, score = mean log-prob of the whole gold answer, on {data['num_samples']} samples of "
        f"{records} "
        "records, by autograd. Positive: a slightly larger factor on that layer raises the gold answer's "
        "log-prob here. A local slope, not a promise of a gain at a finite step; intervals are 95 % over records.",
        "",
        "![sensitivity](sensitivity.png)",
        "",
        f"| point | score | tf-accuracy | intervals excluding 0 (by chance alone: about {0.05 * layers:.1f}) "
        "| largest clear slopes |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        lines.append(
            f"| `{e['name']}` | {fmt(e['score_mean'], 4)} | {fmt(e['tf_accuracy'])} | "
            f"{len(_clear(e['by_layer']))} of {layers} | {_top(e['by_layer'])} |"
        )
    lines += ["", "| layer | " + " | ".join(f"`{e['name']}`" for e in entries) + " |"]
    lines.append("|---|" + "---|" * len(entries))
    for layer in range(layers):
        cells = [e["by_layer"][layer] for e in entries]
        lines.append(
            f"| {layer} | "
            + " | ".join(fmt_interval(c["mean"], c["ci_low"], c["ci_high"], 4, sign=True) for c in cells)
            + " |"
        )
    lines.append("")
    return lines
