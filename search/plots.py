"""Figures of a search report (matplotlib's Agg canvas: no display, no global backend change).

- ``pareto.png``: every scored trial (mean score over positions vs worst position), the Pareto front, the
  baselines and the chosen trial;
- ``factors.png``: the found factors by layer with the Bezier control points, the best uniform factor and 1;
- ``positions.png``: held-out score by gold position for base, best uniform and found (± standard error).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rope_adapter import files

from .lengths import is_multi, split_key
from .report_types import SearchReport


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    files.save_figure(fig, path, dpi=120)


def _score_label(report: SearchReport) -> str:
    task = report["task"]
    if task["score"] == "logprob":
        return f"mean log-prob of the first {task['k']} answer tokens" if task["k"] else "mean answer log-prob"
    if task["score"] == "answer":
        return "teacher-forced accuracy (+ 0.01 x answer log-prob)"
    if task["score"] == "soft":
        return "soft teacher-forced accuracy (sigmoid of the smallest answer-token margin)"
    return "greedy accuracy"


def plot_pareto(report: SearchReport, path: str | Path) -> None:
    """Mean vs worst position score of every scored feasible trial; front, baselines and choice highlighted."""
    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.add_subplot()
    trials = [t for t in report["trials"] if t["evaluated"] and t["feasible"] and t["objectives"]]
    front = set(report["pareto_front"])
    searched = [t for t in trials if t["baseline"] is None]
    if searched:
        ax.scatter(
            [t["objectives"]["mean"] for t in searched],
            [t["objectives"]["worst"] for t in searched],
            s=14,
            color="0.6",
            label="searched trials",
        )
    pts = sorted((t["objectives"]["mean"], t["objectives"]["worst"]) for t in trials if t["number"] in front)
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", color="tab:red", ms=5, lw=1.2, label="Pareto front")
    for t in trials:
        if t["baseline"] == "base":
            ax.scatter(
                [t["objectives"]["mean"]],
                [t["objectives"]["worst"]],
                marker="s",
                s=50,
                color="black",
                label="base (all 1)",
                zorder=3,
            )
        elif t["baseline"] == "uniform":
            ax.scatter(
                [t["objectives"]["mean"]], [t["objectives"]["worst"]], marker="^", s=40, color="tab:blue", zorder=3
            )
            ax.annotate(
                f"{t['uniform']:g}",
                (t["objectives"]["mean"], t["objectives"]["worst"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    chosen = report.get("chosen")
    objectives = chosen["objectives"] if chosen else None
    if chosen and objectives:
        ax.scatter(
            [objectives["mean"]],
            [objectives["worst"]],
            marker="*",
            s=160,
            color="gold",
            edgecolor="black",
            zorder=4,
            label=f"chosen (trial {chosen['number']})",
        )
    ax.scatter([], [], marker="^", color="tab:blue", label="uniform factors")
    study = report["study"]
    ax.set_title(f"{study['evaluated']} scored trials, {study['infeasible']} infeasible (not scored)", fontsize=10)
    ax.set_xlabel(f"mean over gold positions ({_score_label(report)})", fontsize=8)
    ax.set_ylabel("worst gold position", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    _save(fig, Path(path))


def plot_factors(report: SearchReport, path: str | Path) -> None:
    """Found factors by layer with the control points (at depth x * (L - 1)), best uniform and 1."""
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    layers = report["model"]["num_layers"]
    x = np.arange(layers)
    s = report["settings"]
    ax.axhspan(s["s_min"], s["s_max"], color="tab:green", alpha=0.06, label="allowed factors")
    ax.axhline(1.0, color="black", lw=1, label="base (1)")
    for t in report["trials"]:
        if t["number"] in report["pareto_front"] and t["factors"] and t["baseline"] is None:
            ax.plot(x, t["factors"], color="0.75", lw=0.8)
    uniform = report["baselines"].get("best_uniform")
    factor = uniform["uniform"] if uniform else None
    if factor is not None:
        ax.axhline(factor, color="tab:blue", ls="--", lw=1, label=f"best uniform ({factor:g})")
    chosen = report.get("chosen")
    if chosen and chosen.get("factors"):
        ax.plot(x, chosen["factors"], "-o", color="tab:red", ms=3, label=f"found (trial {chosen['number']})")
        cp = np.asarray(chosen["control_points"], dtype=float)
        ax.plot(cp[:, 0] * (layers - 1), cp[:, 1], ":s", color="tab:orange", ms=6, lw=1, label="control points")
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("RoPE scaling factor")
    ax.set_title("factors by layer (grey: other Pareto trials)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    _save(fig, Path(path))


def plot_positions(report: SearchReport, path: str | Path) -> None:
    """Held-out score by gold position, with the paired standard error of each difference to base as error bar."""
    holdout = report.get("holdout")
    if not holdout:
        raise ValueError("the report has no held-out section: there is nothing to plot by gold position")
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    colors = {"base": "black", "best_uniform": "tab:blue", "found": "tab:red"}
    multi = is_multi(report["settings"]["pairs"])
    styles = ["-", "--", ":", "-."]
    for name, cfg in holdout["configs"].items():
        keys = sorted(int(p) for p in cfg["by_position"])
        err = None
        key = f"{name}-base"
        if key in holdout["differences"]:
            err = [holdout["differences"][key]["by_position"][str(p)]["se"] or 0.0 for p in keys]
        label = {
            "base": "base (all 1)",
            "best_uniform": f"best uniform ({cfg.get('uniform')})",
            "found": f"found (trial {cfg.get('trial')})",
        }[name]
        # one line per record length (a multi-length study's keys name length and position; x: relative depth)
        lines = {}
        for i, k in enumerate(keys):
            pairs, position = split_key(k) if multi else (0, k)
            lines.setdefault(pairs, []).append((position / max(1, pairs - 1) if multi else position, i))
        for j, (pairs, points) in enumerate(sorted(lines.items())):
            ax.errorbar(
                [x for x, _ in points],
                [cfg["by_position"][str(keys[i])] for _, i in points],
                yerr=None if err is None else [err[i] for _, i in points],
                marker="o",
                capsize=3,
                color=colors[name],
                linestyle=styles[j % len(styles)],
                label=f"{label}, {pairs} pairs" if multi else label,
            )
    if multi:
        ax.set_xlabel("gold position / (pairs - 1)")
    else:
        ax.set_xticks(sorted(int(p) for p in holdout["samples_per_position"]))
        ax.set_xlabel("gold position")
    ax.set_ylabel(_score_label(report), fontsize=8)
    ax.set_title(
        f"held-out: {holdout['records']} records (error bars: paired SE of the difference to base)", fontsize=9
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    _save(fig, Path(path))
