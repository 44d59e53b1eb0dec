"""results.md of ``rope-adapter eval``: tables people read, rendered from the dict results.json holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rope_adapter.scoring.metrics import METRICS
from rope_adapter.scoring.numbers import fmt

VERDICT_NOTE = (
    "Differences are paired over the same samples; *within noise* means the 95 % confidence interval of the "
    "difference includes 0, so these samples do not show a difference (more samples may); *identical* means "
    "every sample scored exactly the same; *n/a*: a single sample, no interval."
)


def _cell(entry: Mapping[str, Any], digits: int) -> str:
    if entry.get("ci_low") is None:
        return fmt(entry["mean"], digits)
    return f"{fmt(entry['mean'], digits)} [{fmt(entry['ci_low'], digits)}, {fmt(entry['ci_high'], digits)}]"


def _diff(entry: Mapping[str, Any], digits: int) -> str:
    if entry.get("ci_low") is None:
        return f"{entry['diff']:+.{digits}f} ({entry['verdict']})"
    return f"{entry['diff']:+.{digits}f} [{entry['ci_low']:+.{digits}f}, {entry['ci_high']:+.{digits}f}] {entry['verdict']}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _factors(entry: Mapping[str, Any]) -> str:
    factors = entry.get("factors")
    if not factors:
        return "–"
    lo, hi = min(factors), max(factors)
    return f"{lo:.4g}" if abs(hi - lo) < 1e-9 else f"{lo:.4g} – {hi:.4g} (per layer)"


def _rope(entry: Mapping[str, Any]) -> str:
    params = entry.get("rope_parameters") or {}
    if params and all(isinstance(v, dict) for v in params.values()):
        return "; ".join(f"{k}: {_rope({'rope_parameters': v})}" for k, v in params.items())
    kind = params.get("rope_type", "default")
    extra = ", ".join(f"{k} {v}" for k, v in params.items() if k not in {"rope_type", "rope_theta"})
    return f"{kind}" + (f" ({extra})" if extra else "")


def _variants_table(data: Mapping[str, Any]) -> list[str]:
    rows = [
        [f"`{v['name']}`", f"`{v['spec']}`", _rope(v), _factors(v), f"{v.get('seconds', 0):.1f}"]
        for v in data["variants"]
    ]
    return _table(["variant", "spec", "RoPE", "LRS factors", "seconds"], rows)


def _command(data: Mapping[str, Any]) -> list[str]:
    command = data.get("settings", {}).get("command")
    return ["## Reproduce", "", "```bash", command, "```", ""] if command else []


def positions_markdown(data: Mapping[str, Any], plot_name: str | None = "positions.png") -> str:
    """The position-sweep report."""
    settings = data.get("settings", {})
    positions = [str(p) for p in data["positions"]]
    lines = [
        f"# Evaluation: {data['task']} on {settings.get('model', 'the model')}",
        "",
        f"{settings.get('num_records', '?')} records x {len(positions)} gold positions = "
        f"{settings.get('num_samples', '?')} samples, scored for every variant on the same samples "
        f"(seed {settings.get('seed', '?')}, chat template {'on' if settings.get('chat_template') else 'off'}, "
        f"prompts of {settings.get('prompt_tokens', {}).get('min', '?')}–"
        f"{settings.get('prompt_tokens', {}).get('max', '?')} tokens). Cells: mean [95 % CI] "
        "(Wilson for accuracy, Student t for log-probabilities).",
        "",
    ]
    if plot_name:
        lines += [f"![score by gold position]({plot_name})", ""]
    for metric in data["metrics"]:
        digits = 3
        lines += [f"## {METRICS[metric]['title']}", ""]
        rows = []
        for v in data["variants"]:
            s = data["summary"][v["name"]][metric]
            rows.append(
                [f"`{v['name']}`"]
                + [_cell(s["by_position"][p], digits) for p in positions]
                + [_cell(s["overall"], digits)]
            )
        lines += _table(["variant"] + [f"pos {p}" for p in positions] + ["all positions"], rows)
        lines.append("")
    if data.get("comparisons"):
        ref = data["reference"]
        lines += [f"## Differences from `{ref}`", "", VERDICT_NOTE, ""]
        rows = []
        for name, by_metric in data["comparisons"].items():
            for metric, entry in by_metric.items():
                per_pos = ", ".join(f"{p}: {entry['by_position'][p]['verdict']}" for p in positions)
                rows.append([f"`{name}`", METRICS[metric]["short"], _diff(entry["overall"], 3), per_pos])
        lines += _table(["variant", "score", "difference, all positions [95 % CI]", "by position"], rows)
        lines.append("")
    lines += ["## Variants", ""] + _variants_table(data) + [""]
    lines += _command(data)
    return "\n".join(lines)


def _length(n: str | int) -> str:
    return f"{int(n) // 1024}k" if int(n) % 1024 == 0 else str(n)


def _windows(settings: Mapping[str, Any]) -> str:
    count = settings.get("num_windows", "?")
    return f"{count} window" if count == 1 else f"up to {count} windows"


def lengths_markdown(data: Mapping[str, Any], plot_name: str | None = "lengths.png") -> str:
    """The extrapolation report."""
    settings = data.get("settings", {})
    lengths = [str(n) for n in data["lengths"]]
    lines = [
        f"# Extrapolation: perplexity by context length on {settings.get('model', 'the model')}",
        "",
        f"Text: `{settings.get('data_path', '?')}`; {_windows(settings)} per length, "
        + (f"starting every {settings['stride']} tokens" if settings.get("stride") else "without overlap")
        + "; each window is scored in full (every token after the first) in one forward pass whose logits are "
        f"computed {settings.get('chunk_tokens', '?')} rows at a time. The model was trained on "
        f"{settings.get('max_position_embeddings', '?')} positions. Cells: perplexity [95 % CI over windows; "
        "none with one window].",
        "",
    ]
    if plot_name:
        lines += [f"![perplexity by context length]({plot_name})", ""]
    rows = []
    for v in data["variants"]:
        by_len = data["summary"][v["name"]]["by_length"]
        rows.append([f"`{v['name']}`"] + [_cell({**by_len[n], "mean": by_len[n]["perplexity"]}, 2) for n in lengths])
    lines += _table(["variant"] + [_length(n) for n in lengths], rows)
    lines.append("")
    if data.get("comparisons"):
        ref = data["reference"]
        lines += [
            f"## Differences from `{ref}` (mean log-likelihood per token, nats; positive = better)",
            "",
            VERDICT_NOTE,
            "",
        ]
        rows = []
        for name, by_len in data["comparisons"].items():
            rows.append([f"`{name}`"] + [_diff(by_len[n], 3) for n in lengths])
        lines += _table(["variant"] + [_length(n) for n in lengths], rows)
        lines.append("")
    lines += ["## Variants", ""] + _variants_table(data) + [""]
    lines += _command(data)
    return "\n".join(lines)
