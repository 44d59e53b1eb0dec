"""Figures of the evaluation and the analysis, drawn from the plain dicts written to JSON (matplotlib, Agg).

- :func:`plot_positions`: score by gold position, one line per variant with its 95 % band (the U-curve).
- :func:`plot_lengths`: perplexity by context length, one line per variant, log scales.
- :func:`plot_decay`: RoFormer's relative upper bound of RoPE attention by relative distance, per factor.
- :func:`plot_attention_shares`: per-layer share of the last token's attention on beginning/middle/end.
- :func:`plot_sensitivity`: d score / d log s_l per layer with its 95 % band, and by gold position.

Each takes the dict its results file holds, so a figure can be redrawn from the file alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

from rope_adapter.scoring.metrics import METRICS, PROPORTIONS

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np

from rope_adapter import files

from .analysis import DecayCurve, DecayCurves
from .results import LengthResultsFile, PositionResultsFile, ResultsFile

_MARKERS = "osD^vP*Xh<>"


def _PALETTE(index: int) -> Any:
    cmap = plt.get_cmap("tab10")
    return cmap(index % cmap.N)


def _colors(n: int) -> list:
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    files.save_figure(fig, path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def _title(data: ResultsFile, what: str) -> str:
    settings = data.get("settings", {})
    model = settings.get("model") or "model"
    return f"{what} — {data.get('task', '')} on {model}"


def _bounds(
    entries: Sequence[Mapping[str, Any]], key_low: str = "ci_low", key_high: str = "ci_high"
) -> tuple[np.ndarray, np.ndarray]:
    low = np.array([np.nan if e[key_low] is None else e[key_low] for e in entries], dtype=float)
    high = np.array([np.nan if e[key_high] is None else e[key_high] for e in entries], dtype=float)
    return low, high


def _lines(
    ax: Any, positions: Sequence[int], series: Sequence[tuple[int, str, np.ndarray, np.ndarray, np.ndarray]]
) -> None:
    spread = 0.012 * (max(positions) - min(positions) or 1)
    count = len(series)
    for k, (index, name, mean, low, high) in enumerate(series):
        color = _PALETTE(index)
        x = np.array(positions, dtype=float) + (k - (count - 1) / 2) * spread
        ax.plot(x, mean, marker=_MARKERS[index % len(_MARKERS)], color=color, label=name, lw=1.8, ms=5)
        if np.isfinite(low).any():
            yerr = [np.where(np.isfinite(low), mean - low, 0), np.where(np.isfinite(high), high - mean, 0)]
            ax.errorbar(x, mean, yerr=yerr, fmt="none", ecolor=color, alpha=0.55, capsize=3, lw=1)
    ax.set_xticks(list(positions))
    ax.grid(alpha=0.3)


def plot_positions(data: PositionResultsFile, path: str | os.PathLike[str]) -> Path:
    """positions.png: per metric, the score by gold position (top) and, with two or more variants, the paired
    difference from the reference variant (bottom); 95 % intervals as error bars."""
    metrics = list(data["metrics"])
    positions = list(data["positions"])
    names = [v["name"] for v in data["variants"]]
    reference = data.get("reference") or names[0]
    comparisons = data.get("comparisons") or {}
    rows = 2 if comparisons else 1
    fig, axes = plt.subplots(rows, len(metrics), figsize=(6.2 * len(metrics), 4.0 * rows), squeeze=False, sharex=True)
    for col, metric in enumerate(metrics):
        label = METRICS[metric]["short"] if metric in METRICS else metric
        ax = axes[0][col]
        series = []
        for k, name in enumerate(names):
            by_pos = [data["summary"][name][metric]["by_position"][str(p)] for p in positions]
            series.append((k, name, np.array([e["mean"] for e in by_pos], dtype=float), *_bounds(by_pos)))
        _lines(ax, positions, series)
        ax.set_ylabel(label)
        ax.set_title(METRICS[metric]["title"] if metric in METRICS else metric, fontsize=10)
        if metric in PROPORTIONS:
            ax.set_ylim(-0.03, 1.03)
        if rows == 2:
            ax = axes[1][col]
            ax.axhline(0.0, color=_PALETTE(names.index(reference)), lw=1.2, ls="--")
            series = []
            for k, name in enumerate(names):
                if name not in comparisons:
                    continue
                by_pos = [comparisons[name][metric]["by_position"][str(p)] for p in positions]
                series.append((k, name, np.array([e["diff"] for e in by_pos], dtype=float), *_bounds(by_pos)))
            _lines(ax, positions, series)
            ax.set_ylabel(f"{label}: difference from {reference}")
            ax.set_title(f"Paired difference from {reference} (0 inside the bar: within noise)", fontsize=9)
        axes[-1][col].set_xlabel("gold position (0 = start of the context)")
    n = data.get("settings", {}).get("num_records")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(names), 5), frameon=False, bbox_to_anchor=(0.5, -0.05))
    fig.suptitle(
        _title(data, "Score by gold position") + (f" ({n} records per position, 95 % intervals)" if n else ""),
        fontsize=11,
    )
    fig.tight_layout()
    return _save(fig, path)


def _length_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def plot_lengths(data: LengthResultsFile, path: str | os.PathLike[str]) -> Path:
    """lengths.png: perplexity by context length (log-log), a line and 95 % error bars per variant."""
    lengths = list(data["lengths"])
    names = [v["name"] for v in data["variants"]]
    colors = _colors(len(names))
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for k, name in enumerate(names):
        by_len = data["summary"][name]["by_length"]
        mean = np.array([by_len[str(n)]["perplexity"] for n in lengths])
        low = np.array([np.nan if by_len[str(n)]["ci_low"] is None else by_len[str(n)]["ci_low"] for n in lengths])
        high = np.array([np.nan if by_len[str(n)]["ci_high"] is None else by_len[str(n)]["ci_high"] for n in lengths])
        x = np.array(lengths, dtype=float) * (1 + 0.015 * (k - (len(names) - 1) / 2))
        ax.plot(x, mean, marker=_MARKERS[k % len(_MARKERS)], color=colors[k], label=name, lw=1.8, ms=5)
        if np.isfinite(low).any():
            ax.errorbar(x, mean, yerr=[mean - low, high - mean], fmt="none", ecolor=colors[k], alpha=0.6, capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([_length_label(n) for n in lengths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    values = [
        v["perplexity"] for name in names for v in data["summary"][name]["by_length"].values() if v["perplexity"] > 0
    ]
    if values and max(values) / min(values) > 4:  # log scale only when it helps; otherwise plain numbers read better
        ax.set_yscale("log")
    max_pos = data.get("settings", {}).get("max_position_embeddings")
    if max_pos:
        ax.axvline(max_pos, color="grey", ls="--", lw=1)
        ax.annotate(
            f"trained context ({_length_label(int(max_pos))})",
            (max_pos, 0.5),
            xycoords=("data", "axes fraction"),
            xytext=(-4, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize=8,
            color="grey",
            rotation=90,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
        )
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("perplexity (lower is better)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, frameon=True, framealpha=0.85, edgecolor="none", loc="best")
    model = data.get("settings", {}).get("model") or "model"
    ax.set_title(f"Perplexity by context length — {model}", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_decay(data: DecayCurves, path: str | os.PathLike[str]) -> Path:
    """decay.png: RoFormer's relative upper bound by relative distance, one line per factor."""
    distances = np.asarray(data["distances"], dtype=float)
    curves: list[DecayCurve] = data["curves"]
    colors = _colors(len(curves))
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    log = data.get("scale") == "log"
    for k, curve in enumerate(curves):
        ax.plot(distances, curve["bound"], color=colors[k], label=curve["label"], lw=1.6)
        if log and "bound_max" in curve:
            ax.fill_between(distances, curve["bound_min"], curve["bound_max"], color=colors[k], alpha=0.08, lw=0)
    if log:
        ax.set_xscale("log")
        ax.set_xlabel("relative distance |m - n| (tokens, log scale; line: mean over a bin, band: its range)")
    else:
        ax.set_xlabel("relative distance |m - n| (tokens)")
    ax.set_ylabel("relative upper bound (1/(d/2)) Σ_j |S_j|")
    ax.set_title(
        f"RoPE long-term decay (RoFormer §3.4.3), head_dim {data['head_dim']}, theta {data['theta']:g}", fontsize=10
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def plot_attention_shares(data: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """attention.png: heat maps (layers x regions) per variant, plus the difference from the first variant."""
    regions = list(data["regions"])
    entries: Sequence[Mapping[str, Any]] = data["variants"]
    shares = [np.asarray(e["shares"], dtype=float) for e in entries]
    num_layers = shares[0].shape[0]
    panels = len(entries) + (1 if len(entries) > 1 else 0)
    height = max(3.2, 0.22 * num_layers + 1.6)
    fig, axes = plt.subplots(1, panels, figsize=(2.9 * panels + 0.6, height), squeeze=False)
    vmax = max(float(s.max()) for s in shares)
    for ax, entry, values in zip(axes[0], entries, shares, strict=False):
        im = ax.imshow(values, aspect="auto", cmap="viridis", vmin=0.0, vmax=vmax, origin="upper")
        ax.set_title(entry["name"], fontsize=9)
        _annotate(ax, values, fmt="{:.2f}", small=num_layers > 16, image=im)
        fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
    if len(entries) > 1:
        ax = axes[0][-1]
        delta = shares[-1] - shares[0]
        limit = float(np.abs(delta).max()) or 1e-6
        im = ax.imshow(delta, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, origin="upper")
        ax.set_title(f"{entries[-1]['name']} − {entries[0]['name']}", fontsize=9)
        _annotate(ax, delta, fmt="{:+.2f}", small=num_layers > 16, image=im)
        fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
    for ax in axes[0]:
        ax.set_xticks(range(len(regions)))
        ax.set_xticklabels(regions, fontsize=8)
        step = 1 if num_layers <= 16 else 2
        ax.set_yticks(range(0, num_layers, step))
        ax.set_yticklabels([str(i) for i in range(0, num_layers, step)], fontsize=7)
    axes[0][0].set_ylabel("decoder layer")
    skip = data.get("skip_first", 0)
    fig.suptitle(
        f"Share of the last token's attention by context region (mean over heads and {data.get('num_samples', '?')} "
        f"prompts" + (f"; first {skip} token(s) left out" if skip else "") + ")",
        fontsize=10,
    )
    fig.tight_layout()
    return _save(fig, path)


def plot_sensitivity(data: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """sensitivity.png: per layer, the mean d score / d log s_l with its 95 % interval (one line per point),
    and a heat map (gold position x layer) for the first point."""
    points: Sequence[Mapping[str, Any]] = data["points"]
    fig, (ax, heat) = plt.subplots(1, 2, figsize=(11.5, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    for i, point in enumerate(points):
        rows = point["by_layer"]
        layers = np.array([r["layer"] for r in rows])
        mean = np.array([r["mean"] for r in rows], dtype=float)
        low, high = _bounds(rows)
        color = _PALETTE(i)
        ax.plot(layers, mean, marker=_MARKERS[i % len(_MARKERS)], ms=3.5, color=color, label=point["name"])
        ax.fill_between(layers, low, high, color=color, alpha=0.18, linewidth=0)
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("d score / d log s  (score: whole-answer log-prob)")
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    first = points[0]
    positions = sorted(first["by_position"], key=int)
    values = np.array([first["by_position"][p] for p in positions], dtype=float)
    limit = float(np.abs(values).max()) or 1e-6
    im = heat.imshow(values, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, origin="upper")
    heat.set_yticks(range(len(positions)))
    heat.set_yticklabels(positions, fontsize=7)
    heat.set_ylabel("gold position")
    heat.set_xlabel("decoder layer")
    heat.set_title(f"{first['name']}: by gold position", fontsize=9)
    fig.colorbar(im, ax=heat, fraction=0.05, pad=0.03)
    fig.suptitle(
        f"Sensitivity of the gold answer's log-prob to each layer's RoPE factor ({data.get('num_samples', '?')} "
        f"samples of {data.get('num_records', '?')} records; band: 95 % over records)",
        fontsize=10,
    )
    fig.tight_layout()
    return _save(fig, path)


def _annotate(ax: Any, values: np.ndarray, fmt: str, small: bool, image: Any = None) -> None:
    if small and values.shape[0] > 40:
        return
    for (i, j), v in np.ndenumerate(values):
        color = "white"
        if image is not None:  # dark text on light cells
            r, g, b, _ = image.cmap(image.norm(v))
            color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"
        ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=5.5 if small else 7, color=color)
