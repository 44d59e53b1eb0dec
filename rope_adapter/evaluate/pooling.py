"""Paired differences between variants scored by several ``rope-adapter eval`` runs, pooled over their records
(``rope-adapter compare``).

Runs with the same task, seed and record count score the same samples, so a variant added later (the found
adapter) can be compared with variants scored earlier without scoring them again. Runs on other seeds add other
records: every sample is keyed by (record id, gold position), and record ids name their seed (``kv-seed7:17``), so
the pooled comparison counts each record once. Each comparison ``A - B`` takes the samples both variants have; the
difference of each metric is paired by record (each record's mean over its gold positions, then a t interval over
records, and beside it a percentile bootstrap interval over records):
:func:`rope_adapter.scoring.paired.differences_by_position_and_record`, the rule the search's held-out report uses.

Runs of another model, task or prompt layout (pairs, positions, chat template) are refused, as is a sample scored
twice with different values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import PurePath
from typing import TypedDict

import numpy as np

from rope_adapter.identity import is_older_form
from rope_adapter.json_types import JsonValue
from rope_adapter.scoring.loading import EvalError
from rope_adapter.scoring.numbers import fmt, fmt_interval
from rope_adapter.scoring.paired import differences_by_position_and_record

from .evaluation import load_results
from .results import ResultsFile

Key = tuple[str, int]
"""(record id, gold position): one sample of one variant."""
Pooled = dict[str, dict[Key, dict[str, float]]]
"""``{variant: {(record id, gold position): {metric: value}}}`` over every run."""


class PairedComparison(TypedDict):
    """One comparison ``variant - reference`` on one metric, pooled over the runs' common samples."""

    metric: str
    variant: str
    reference: str
    samples: int
    records: int
    seeds: list[str]  # the record ids' prefixes (``kv-seed7``): the sets pooled
    variant_mean: float
    reference_mean: float
    by_position: dict[int, float]  # gold position -> mean difference
    mean: float  # mean over records of each record's mean difference
    ci_low: float  # 95 % t interval over records
    ci_high: float
    bootstrap_low: float  # 95 % percentile bootstrap interval over records
    bootstrap_high: float
    verdict: str


def _layout(data: ResultsFile) -> dict[str, JsonValue]:
    """What must agree between pooled runs: the model and the prompt layout, not the seed or record count."""
    settings = data.get("settings", {})
    task = {k: v for k, v in settings.get("task_settings", {}).items() if k not in ("seed", "num_records")}
    if isinstance(task.get("data_path"), str):  # the file by its name: its folder is a local path (other machines,
        # a committed run's `<local>/`); its content is data_identity, compared wherever both runs record it
        task["data_path"] = PurePath(str(task["data_path"])).name
    layout: dict[str, JsonValue] = {
        "task": data.get("task"),
        "model": settings.get("model"),
        "dtype": settings.get("dtype"),
        "chat_template": settings.get("chat_template"),
        "positions": data.get("positions"),
        "task_settings": task,
        "logprob_tokens": settings.get("logprob_tokens"),
    }
    # what runs record since these were added: compared wherever both runs have it
    for name in RECORDED_SINCE:
        if name in settings:
            layout[name] = settings[name]  # type: ignore[literal-required]
    return layout


RECORDED_SINCE = ("model_identity", "data_identity", "tokenizer", "system_prompt", "max_new_tokens_option")
"""Settings of the layout that older results.json files lack: the weights and data by what they hold, the
tokenizer, the system prompt and ``--max-new-tokens``. A run that has one is pooled only with runs that have the same
or none."""


def _same_setting(a: JsonValue, b: JsonValue) -> bool:
    """Equal settings, or a model identity and its older form (compared on what both record)."""
    return a == b or is_older_form(a, b) or is_older_form(b, a)


def _fuller(a: JsonValue, b: JsonValue) -> JsonValue:
    """Of two settings that agree, the one that records more (a model identity rather than its older form)."""
    return b if is_older_form(a, b) else a


def _variant_identity(data: ResultsFile) -> dict[str, JsonValue]:
    """Each variant's name -> what it computes (its factors and RoPE settings, not its spec's paths)."""
    return {
        str(v["name"]): {"factors": v.get("factors"), "rope_parameters": v.get("rope_parameters")}
        for v in data.get("variants", [])
    }


def load_runs(paths: Sequence[str | os.PathLike[str]]) -> Pooled:
    """Every sample of the position sweeps ``paths`` (results.json files, or the folders holding them), checked to
    be poolable; :class:`EvalError` naming the file when they are not: another model, task, prompt layout or data,
    a variant name that means other factors in another run, or a sample scored twice with other values."""
    if not paths:
        raise EvalError("no runs given: pass the results.json of one or more `rope-adapter eval` runs")
    pooled: Pooled = {}
    agreed: dict[str, JsonValue] = {}  # the layout of the runs read so far (each setting as the first run with it)
    variants: dict[str, tuple[JsonValue, str | os.PathLike[str]]] = {}
    for path in paths:
        data = load_results(path)
        if data.get("kind") != "positions":
            raise EvalError(f"{path}: not a position sweep of `rope-adapter eval` (kind {data.get('kind')!r})")
        layout = _layout(data)
        diff = sorted(k for k in layout if k in agreed and not _same_setting(layout[k], agreed[k]))
        if diff:
            raise EvalError(
                f"{path}: cannot pool with the runs before it ({paths[0]}): they differ in {', '.join(diff)}"
            )
        # each setting as the first run with it, a model identity in its fullest form
        agreed = {k: _fuller(v, layout[k]) if k in layout else v for k, v in {**layout, **agreed}.items()}
        for name, identity in _variant_identity(data).items():
            seen = variants.setdefault(name, (identity, path))
            if seen[0] != identity:
                raise EvalError(
                    f"{path}: variant {name!r} has other factors or RoPE settings than in {seen[1]}; give one of "
                    "them another name (`--variants NAME=SPEC`)"
                )
        for s in data["samples"]:
            key = (str(s["record_id"]), int(s["position"]))
            # the metrics: numbers only (a greedy run's samples also hold the decoded text)
            values = {
                k: float(v) for k, v in s.items() if k not in ("sample", "position") and isinstance(v, int | float)
            }
            old = pooled.setdefault(s["variant"], {}).get(key, {})
            if any(old[m] != v for m, v in values.items() if m in old):
                raise EvalError(f"{path}: {s['variant']!r} at {key} was scored before with other values")
            pooled[s["variant"]][key] = {**old, **values}
    return pooled


def compare(pooled: Pooled, variant: str, reference: str, metric: str) -> PairedComparison:
    """``variant - reference`` on ``metric`` over the samples both have; :class:`EvalError` naming what is there
    when a variant or the metric is not."""
    for name in (variant, reference):
        if name not in pooled:
            raise EvalError(f"no samples of variant {name!r}; the runs have {', '.join(sorted(pooled))}")
    a, b = pooled[variant], pooled[reference]
    keys = sorted(k for k in set(a) & set(b) if metric in a[k] and metric in b[k])
    if not keys:
        metrics = sorted({m for values in a.values() for m in values} & {m for values in b.values() for m in values})
        raise EvalError(
            f"no common samples with {metric!r} between {variant!r} and {reference!r} (metrics both have: "
            f"{', '.join(metrics) or 'none'})"
        )
    d = differences_by_position_and_record(
        np.array([a[k][metric] for k in keys]),
        np.array([b[k][metric] for k in keys]),
        np.array([p for _, p in keys]),
        [r for r, _ in keys],
    )
    mean = d["mean"]
    return PairedComparison(
        metric=metric,
        variant=variant,
        reference=reference,
        samples=len(keys),
        records=mean["n_records"],
        seeds=sorted({r.rsplit(":", 1)[0] for r, _ in keys}),
        variant_mean=float(np.mean([a[k][metric] for k in keys])),
        reference_mean=float(np.mean([b[k][metric] for k in keys])),
        by_position={int(p): v["diff"] for p, v in d["by_position"].items()},
        mean=mean["diff"],
        ci_low=mean["ci_low"],
        ci_high=mean["ci_high"],
        bootstrap_low=mean["bootstrap_low"],
        bootstrap_high=mean["bootstrap_high"],
        verdict=mean["verdict"],
    )


TABLE_HEADER = (
    "| metric | comparison | records (seeds) | means | by position | mean [95 % t CI] | bootstrap CI | verdict |\n"
    "|---|---|---|---|---|---|---|---|"
)


def table_row(r: PairedComparison) -> str:
    """One :func:`compare` row in the columns of :data:`TABLE_HEADER`."""
    per = " / ".join(f"{p}: {fmt(v, sign=True)}" for p, v in r["by_position"].items())
    boot = f"[{fmt(r['bootstrap_low'], sign=True)}, {fmt(r['bootstrap_high'], sign=True)}]"
    return (
        f"| {r['metric']} | {r['variant']} - {r['reference']} | {r['records']} ({', '.join(r['seeds'])}) | "
        f"{fmt(r['variant_mean'])} vs {fmt(r['reference_mean'])} | {per} | "
        f"{fmt_interval(r['mean'], r['ci_low'], r['ci_high'], sign=True)} | {boot} | {r['verdict']} |"
    )


def markdown(rows: Sequence[PairedComparison], paths: Sequence[str | os.PathLike[str]]) -> str:
    """The comparisons as a Markdown page naming the runs."""
    lines = [
        "# Paired differences between `rope-adapter eval` runs",
        "",
        "Runs: " + ", ".join(f"`{p}`" for p in paths) + ".",
        "",
        "Matched by (record, gold position); records of all runs pooled; differences paired by record: 95 % t "
        "interval over records, and a percentile bootstrap interval over records (10,000 resamples, seed 0).",
        "",
        TABLE_HEADER,
        *(table_row(r) for r in rows),
    ]
    return "\n".join(lines) + "\n"
