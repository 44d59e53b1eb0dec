"""results.md of ``rope-adapter eval``: tables people read, rendered from the dict results.json holds."""

from __future__ import annotations

from collections.abc import Sequence

from rope_adapter.rope_settings import RopeSettings, is_per_layer_type
from rope_adapter.scoring.intervals import DifferenceEntry, IntervalEntry
from rope_adapter.scoring.metrics import METRICS
from rope_adapter.scoring.numbers import fmt

from .results import (
    EvaluatedVariant,
    LengthResultsFile,
    LengthSettings,
    Perplexity,
    PositionResultsFile,
    ResultsFile,
)

VERDICT_NOTE = (
    "Differences are paired over the same samples; *within noise* means the 95 % confidence interval of the "
    "difference includes 0, so these samples do not show a difference (more samples may); *identical* means "
    "every sample scored exactly the same; *n/a*: a single sample, no interval."
)


def _cell(entry: IntervalEntry, digits: int) -> str:
    if entry.get("ci_low") is None:
        return fmt(entry["mean"], digits)
    return f"{fmt(entry['mean'], digits)} [{fmt(entry['ci_low'], digits)}, {fmt(entry['ci_high'], digits)}]"


def _diff(entry: DifferenceEntry, digits: int) -> str:
    if entry.get("ci_low") is None:
        return f"{entry['diff']:+.{digits}f} ({entry['verdict']})"
    return f"{entry['diff']:+.{digits}f} [{entry['ci_low']:+.{digits}f}, {entry['ci_high']:+.{digits}f}] {entry['verdict']}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _factors(entry: EvaluatedVariant) -> str:
    factors = entry.get("factors")
    if not factors:
        return "–"
    lo, hi = min(factors), max(factors)
    return f"{lo:.4g}" if abs(hi - lo) < 1e-9 else f"{lo:.4g} – {hi:.4g} (per layer)"


def _rope(params: RopeSettings) -> str:
    if is_per_layer_type(params):
        return "; ".join(f"{k}: {_rope(v)}" for k, v in params.items())
    kind = params.get("rope_type", "default")
    extra = ", ".join(f"{k} {v}" for k, v in params.items() if k not in {"rope_type", "rope_theta"})
    return f"{kind}" + (f" ({extra})" if extra else "")


def _page(data: ResultsFile, title: str, intro: str, figure: str, plot_name: str | None, body: list[str]) -> str:
    """A sweep's report: its title on the model, ``intro``, the figure, ``body`` (tables), the variants and the
    command that reproduces it."""
    lines = [f"# {title} on {data['settings'].get('model', 'the model')}", "", intro, ""]
    if plot_name:
        lines += [f"![{figure}]({plot_name})", ""]
    lines += body
    rows = [
        [f"`{v['name']}`", f"`{v['spec']}`", _rope(v.get("rope_parameters") or {}), _factors(v)]
        + [f"{v.get('seconds', 0):.1f}"]
        for v in data["variants"]
    ]
    lines += ["## Variants", ""] + _table(["variant", "spec", "RoPE", "LRS factors", "seconds"], rows) + [""]
    command = data["settings"].get("command")
    lines += ["## Reproduce", "", "```bash", command, "```", ""] if command else []
    return "\n".join(lines)


def _differences(reference: str, what: str, header: list[str], rows: list[list[str]]) -> list[str]:
    """The section of paired differences from the reference variant (``what``: the measure, after the title)."""
    return [f"## Differences from `{reference}`{what}", "", VERDICT_NOTE, "", *_table(header, rows), ""]


def positions_markdown(data: PositionResultsFile, plot_name: str | None = "positions.png") -> str:
    """The position-sweep report."""
    settings = data["settings"]
    positions = [str(p) for p in data["positions"]]
    prompts = settings.get("prompt_tokens", {})
    intro = (
        f"{settings.get('num_records', '?')} records x {len(positions)} gold positions = "
        f"{settings.get('num_samples', '?')} samples, scored for every variant on the same samples "
        f"(seed {settings.get('seed', '?')}, chat template {'on' if settings.get('chat_template') else 'off'}, "
        f"prompts of {prompts.get('min', '?')}–{prompts.get('max', '?')} tokens). Cells: mean [95 % CI] "
        "(Wilson for accuracy, Student t for log-probabilities)."
    )
    body = []
    for metric in data["metrics"]:
        digits = 3
        body += [f"## {METRICS[metric]['title']}", ""]
        rows = []
        for v in data["variants"]:
            s = data["summary"][v["name"]][metric]
            rows.append(
                [f"`{v['name']}`"]
                + [_cell(s["by_position"][p], digits) for p in positions]
                + [_cell(s["overall"], digits)]
            )
        body += _table(["variant"] + [f"pos {p}" for p in positions] + ["all positions"], rows)
        body.append("")
    if data.get("comparisons"):
        rows = []
        for name, by_metric in data["comparisons"].items():
            for metric, entry in by_metric.items():
                per_pos = ", ".join(f"{p}: {entry['by_position'][p]['verdict']}" for p in positions)
                rows.append([f"`{name}`", METRICS[metric]["short"], _diff(entry["overall"], 3), per_pos])
        header = ["variant", "score", "difference, all positions [95 % CI]", "by position"]
        body += _differences(data["reference"], "", header, rows)
    return _page(data, f"Evaluation: {data['task']}", intro, "score by gold position", plot_name, body)


def _length(n: str | int) -> str:
    return f"{int(n) // 1024}k" if int(n) % 1024 == 0 else str(n)


def _windows(settings: LengthSettings) -> str:
    count = settings.get("num_windows", "?")
    return f"{count} window" if count == 1 else f"up to {count} windows"


def lengths_markdown(data: LengthResultsFile, plot_name: str | None = "lengths.png") -> str:
    """The extrapolation report."""
    settings = data["settings"]
    lengths = [str(n) for n in data["lengths"]]
    intro = (
        f"Text: `{settings.get('data_path', '?')}`; {_windows(settings)} per length, "
        + (f"starting every {settings['stride']} tokens" if settings.get("stride") else "without overlap")
        + "; each window is scored in full (every token after the first) in one forward pass whose logits are "
        f"computed {settings.get('chunk_tokens', '?')} rows at a time. The model was trained on "
        f"{settings.get('max_position_embeddings', '?')} positions. Cells: perplexity [95 % CI over windows; "
        "none with one window]."
    )
    rows = []
    for v in data["variants"]:
        by_len = data["summary"][v["name"]]["by_length"]
        rows.append([f"`{v['name']}`"] + [_cell(_as_interval(by_len[n]), 2) for n in lengths])
    header = ["variant"] + [_length(n) for n in lengths]
    body = [*_table(header, rows), ""]
    if data.get("comparisons"):
        rows = [[f"`{name}`"] + [_diff(by_len[n], 3) for n in lengths] for name, by_len in data["comparisons"].items()]
        what = " (mean log-likelihood per token, nats; positive = better)"
        body += _differences(data["reference"], what, header, rows)
    title = "Extrapolation: perplexity by context length"
    return _page(data, title, intro, "perplexity by context length", plot_name, body)


def _as_interval(entry: Perplexity) -> IntervalEntry:
    """A perplexity with its interval, as a table cell reads an interval."""
    return {"mean": entry["perplexity"], "ci_low": entry["ci_low"], "ci_high": entry["ci_high"], "n": entry["windows"]}
