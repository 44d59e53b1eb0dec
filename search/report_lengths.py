"""The per-length part of a multi-length study's report: for every record length, the mean and the worst over its
gold positions of base, best uniform and found (search set, held out), of every confirmed candidate, and the held-out
paired differences on that length's samples. Pure: it reads the report's own (length, position) keys."""

from __future__ import annotations

from collections.abc import Mapping

from rope_adapter.differences import MeanDifference
from rope_adapter.scoring.numbers import fmt, fmt_interval

from .lengths import by_length, is_multi, split_key, study_lengths
from .report_types import LengthEntry, SearchReport


def _at(values: Mapping[str, float] | None, pairs: int) -> dict[str, float] | None:
    return by_length(values).get(str(pairs)) if values else None


def length_entries(report: SearchReport) -> list[LengthEntry] | None:
    """One entry per record length (None for a single-length study)."""
    pairs_setting = report["settings"]["pairs"]
    if not is_multi(pairs_setting):
        return None
    configs = {
        "base": report["baselines"]["base"],
        "best_uniform": report["baselines"]["best_uniform"],
        "found": report["chosen"],
    }
    confirmation = report.get("confirmation") or {}
    holdout = report.get("holdout") or {}
    entries: list[LengthEntry] = []
    for pairs in study_lengths(pairs_setting):
        search = {n: _at(c.get("by_position"), pairs) for n, c in configs.items() if c}
        held = {n: _at(c.get("by_position"), pairs) for n, c in (holdout.get("configs") or {}).items()}
        confirmed = {str(c["trial"]): _at(c["by_position"], pairs) for c in confirmation.get("candidates", [])}
        entries.append(
            {
                "pairs": pairs,
                "positions": sorted(split_key(k)[1] for k in report["task"]["positions"] if split_key(k)[0] == pairs),
                "search": {n: v for n, v in search.items() if v is not None},
                "confirmation": {n: v for n, v in confirmed.items() if v is not None},
                "holdout": {n: v for n, v in held.items() if v is not None},
                "differences": dict((holdout.get("by_length") or {}).get(str(pairs), {})),
            }
        )
    return entries


def _cell(d: MeanDifference | None) -> str:
    if not d:
        return "–"
    return fmt_interval(d["diff"], d.get("ci_low"), d.get("ci_high"), 3, sign=True)


def length_lines(report: SearchReport) -> list[str]:
    """The Markdown section of a multi-length study (nothing for one length)."""
    entries = report.get("by_length")
    if not entries:
        return []
    lines = [
        "",
        "## By record length",
        "",
        "Mean / worst over each length's gold positions; held-out differences paired by record, 95 % t intervals.",
        "",
        "| pairs | positions | set | base | best uniform | found | found - base | found - best uniform |",
        "|---" * 8 + "|",
    ]
    for entry in entries:
        for label, values in (("search", entry["search"]), ("held out", entry["holdout"])):
            if not values:
                continue
            diffs = entry["differences"] if label == "held out" else {}
            cells = [
                f"{fmt(values[n]['mean'])} / {fmt(values[n]['worst'])}" if n in values else "–"
                for n in ("base", "best_uniform", "found")
            ]
            lines.append(
                f"| {entry['pairs']} | {entry['positions']} | {label} | " + " | ".join(cells) + " | "
                f"{_cell((diffs.get('found-base') or {}).get('mean'))} | "
                f"{_cell((diffs.get('found-best_uniform') or {}).get('mean'))} |"
            )
    confirmed = [
        f"- {e['pairs']} pairs: " + ", ".join(f"trial {t} {fmt(v['mean'])} / {fmt(v['worst'])}" for t, v in c.items())
        for e in entries
        if (c := e["confirmation"])
    ]
    if confirmed:
        lines += ["", "Confirmation records, mean / worst by length:", "", *confirmed]
    return [*lines, ""]
