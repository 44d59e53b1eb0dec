"""The headline results: each searched curve against the best uniform factor and the base, pooled over every
held-out set scored for that curve at one prompt length, with the per-set numbers beneath.

A curve's held-out sets are the search's own held-out split (records the search never scored, chosen before it
ran; ``search_report.json`` keeps its per-record summary: mean, standard error and count) and every fresh set
scored later with ``rope-adapter eval`` (``results.json``, every sample). None is left out and none is
promoted: the headline is the estimate over all of their records together. A float32 re-score of records
already in a set is the same records in another dtype, not a new set, so it is not pooled (the study pages
report it).

The metric is teacher-forced accuracy (every answer token is the model's argmax: greedy decoding's verdict),
which every set has; a set run with greedy decoding also reports its real greedy accuracy beside it. Each
comparison is paired by record (a record's mean over its gold positions, differenced), the rule of
``rope_adapter.scoring.paired``. Pooling from per-set summaries is exact: the pooled sum of squares is each
set's within-set sum of squares plus ``n_i (mean_i - pooled mean)^2``, so the pooled t interval (df = records
- 1) is the one ``rope-adapter compare`` gives over the same records' raw samples
(``tests/evaluate/test_pooled_headline.py`` checks both).

    .venv/bin/python benchmarks/pooled_headline.py   # -> benchmarks/results/pooled_headline/pooled_headline.{json,md}
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rope_adapter import files
from rope_adapter.cli.demo import read_search_report
from rope_adapter.evaluate.evaluation import load_results
from rope_adapter.evaluate.pooling import load_runs
from rope_adapter.scoring.intervals import difference_from_se
from rope_adapter.scoring.numbers import fmt, fmt_interval
from rope_adapter.search.lengths import KEY_BASE

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("benchmarks/results")
COMPARISONS = (("found", "best_uniform"), ("found", "base"), ("best_uniform", "base"))
METRIC = "tf_accuracy"


@dataclass(frozen=True)
class HeldOutSet:
    """One held-out set of a curve: the search's own split (``report``) or ``rope-adapter eval`` runs."""

    label: str
    dtype: str
    report: str | None = None  # a search_report.json (its holdout section)
    runs: tuple[str, ...] = ()  # results.json files pooled into one set (same records, variants added later)
    length: int | None = None  # with a report of a study over several lengths: this length's samples only


@dataclass(frozen=True)
class Curve:
    """A searched curve at one prompt length, with the variant names its eval runs use."""

    name: str
    model: str
    length: str
    uniform: str  # the eval variant of the search's best uniform factor, e.g. "uniform:1.1"
    sets: tuple[HeldOutSet, ...]


@dataclass
class Summary:
    """Per-record paired differences of one comparison on one set (or pooled): mean, sd and count."""

    n: int
    mean: float
    sd: float
    means: dict[str, float] = field(default_factory=dict)  # each variant's mean accuracy on these records

    def interval(self) -> dict[str, Any]:
        se = self.sd / math.sqrt(self.n) if self.n > 1 else None
        d = difference_from_se(self.mean, se, self.n)
        return {"diff": d.mean, "ci_low": d.low, "ci_high": d.high, "records": self.n, "verdict": d.verdict}


def _load_sibling(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _eval_variant(curve: Curve, which: str) -> str:
    return {"found": "found", "base": "base", "best_uniform": curve.uniform}[which]


def summarise_runs(paths: list[Path], variant: str, reference: str, metric: str = METRIC) -> Summary:
    """``variant - reference`` paired by record over the samples both have in ``rope-adapter eval`` runs."""
    pooled = load_runs(paths)
    a, b = pooled[variant], pooled[reference]
    keys = [k for k in sorted(set(a) & set(b)) if metric in a[k] and metric in b[k]]
    by_record: dict[str, tuple[list[float], list[float]]] = {}
    for record, position in keys:
        va, vb = by_record.setdefault(record, ([], []))
        va.append(a[(record, position)][metric])
        vb.append(b[(record, position)][metric])
    diffs = np.array([np.mean(va) - np.mean(vb) for va, vb in by_record.values()])
    sd = float(diffs.std(ddof=1)) if diffs.size > 1 else 0.0
    means = {
        variant: float(np.mean([a[k][metric] for k in keys])),
        reference: float(np.mean([b[k][metric] for k in keys])),
    }
    return Summary(int(diffs.size), float(diffs.mean()), sd, means)


def summarise_report(path: Path, variant: str, reference: str, length: int | None = None) -> Summary:
    """The same from a search's held-out section (``found``/``best_uniform``/``base``, teacher-forced); with
    ``length``, one record length of a study over several (its ``by_length`` differences and those positions)."""
    holdout = read_search_report(path)["holdout"]
    if length is None:
        mean = holdout["differences"][f"{variant}-{reference}"]["tf_accuracy"]["mean"]
        means = {k: float(holdout["configs"][k]["tf_accuracy"]) for k in (variant, reference)}
    else:
        mean = holdout["by_length"][str(length)][f"{variant}-{reference}"]["tf_accuracy"]["mean"]
        means = {}
        for k in (variant, reference):  # every position of a length has every record: the mean of position means
            cells = holdout["configs"][k]["tf_accuracy_by_position"]
            means[k] = float(np.mean([v for p, v in cells.items() if int(p) // KEY_BASE == length]))
    n = int(mean["n_records"])
    return Summary(n, float(mean["diff"]), float(mean["se"]) * math.sqrt(n), means)


def pool(parts: list[Summary]) -> Summary:
    """The per-record summary of all parts' records together (exact: within- plus between-set squares)."""
    n = sum(p.n for p in parts)
    mean = sum(p.n * p.mean for p in parts) / n
    squares = sum((p.n - 1) * p.sd**2 + p.n * (p.mean - mean) ** 2 for p in parts)
    means = {k: sum(p.n * p.means[k] for p in parts) / n for k in parts[0].means}
    return Summary(n, mean, math.sqrt(squares / (n - 1)) if n > 1 else 0.0, means)


def summarise_set(curve: Curve, s: HeldOutSet, variant: str, reference: str, root: Path = ROOT) -> Summary:
    if s.report is not None:
        return summarise_report(root / s.report, variant, reference, s.length)
    summary = summarise_runs([root / p for p in s.runs], _eval_variant(curve, variant), _eval_variant(curve, reference))
    # name the variants as the report does, so the sets pool
    summary.means = {
        variant: summary.means[_eval_variant(curve, variant)],
        reference: summary.means[_eval_variant(curve, reference)],
    }
    return summary


def greedy_note(curve: Curve, s: HeldOutSet, root: Path = ROOT) -> str | None:
    """A greedy run's real greedy accuracy difference (found - best uniform), when the set has one."""
    paths = [root / p for p in s.runs]
    if not paths or not any("accuracy" in x for p in paths for x in load_results(p)["samples"][:1]):
        return None
    summary = summarise_runs(paths, "found", curve.uniform, metric="accuracy")
    d = summary.interval()
    return "greedy decoding: found - best uniform " + fmt_interval(d["diff"], d["ci_low"], d["ci_high"], sign=True)


def evaluate_curve(curve: Curve, root: Path = ROOT) -> dict[str, Any]:
    per_set = []
    pooled: dict[str, dict[str, Any]] = {}
    means: dict[str, float] = {}
    for variant, reference in COMPARISONS:
        parts = [summarise_set(curve, s, variant, reference, root) for s in curve.sets]
        total = pool(parts)
        pooled[f"{variant} - {reference}"] = total.interval()
        means.update(total.means)
        for i, part in enumerate(parts):
            if len(per_set) <= i:
                s = curve.sets[i]
                per_set.append({"set": s.label, "dtype": s.dtype, "files": list(s.runs) or [s.report], "means": {}})
                per_set[i]["note"] = greedy_note(curve, s, root)
            per_set[i][f"{variant} - {reference}"] = part.interval()
            per_set[i]["means"].update(part.means)
    return {**asdict(curve), "pooled": pooled, "pooled_means": means, "per_set": per_set}


def _row(label: str, records: int, means: dict[str, float], diffs: dict[str, Any], extra: str = "") -> str:
    cells = [
        fmt_interval(
            diffs[f"{v} - {r}"]["diff"], diffs[f"{v} - {r}"]["ci_low"], diffs[f"{v} - {r}"]["ci_high"], sign=True
        )
        for v, r in COMPARISONS
    ]
    return (
        f"| {label} | {records} | {fmt(means['base'])} | {fmt(means['best_uniform'])} | {fmt(means['found'])} | "
        + " | ".join(cells)
        + f" |{extra}"
    )


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Pooled held-out results of the searched curves",
        "",
        "Written by `benchmarks/pooled_headline.py`. Teacher-forced accuracy (greedy decoding's verdict), each",
        "comparison paired by record, 95 % t interval over records. The first row of each table pools every",
        "held-out set scored for the curve at that length; the rows under it are the sets.",
    ]
    for r in results:
        u = r["uniform"].split(":", 1)[1]
        lines += [
            "",
            f"## {r['model']}, {r['length']}: {r['name']}",
            "",
            f"| held-out set | records | base | best uniform ({u}) | found | found - best uniform | found - base | "
            "best uniform - base |",
            "|---|---|---|---|---|---|---|---|",
        ]
        n = r["pooled"]["found - base"]["records"]
        lines.append(_row("**all sets pooled**", n, r["pooled_means"], r["pooled"]))
        for s in r["per_set"]:
            label = f"{s['set']} ({s['dtype']})" + (f"; {s['note']}" if s["note"] else "")
            lines.append(_row(label, s["found - base"]["records"], s["means"], s))
    return "\n".join(lines) + "\n"


def _q(name: str) -> str:
    return str(RESULTS / name)


def _kv_sets(folder: str, dtype: str, fresh_records: int, greedy_records: int) -> tuple[HeldOutSet, ...]:
    """A search folder's KV-retrieval held-out sets, all in ``dtype``: the search's own split (40 records), the
    fresh records of seed 7 and the greedy run of seed 8 (``heldout_eval.sh`` writes both)."""
    return (
        HeldOutSet("the search's held-out split, 40 records", dtype, report=_q(f"{folder}/search_report.json")),
        HeldOutSet(
            f"fresh seed 7, {fresh_records} records", dtype, runs=(_q(f"{folder}/heldout/fresh-seed7/results.json"),)
        ),
        HeldOutSet(
            f"fresh seed 8, {greedy_records} records, greedy run",
            dtype,
            runs=(_q(f"{folder}/heldout/greedy-seed8/results.json"),),
        ),
    )


def _litm_set(folder: str, records: int) -> HeldOutSet:
    """The Lost in the Middle 75-pair file's first ``records`` records (``heldout_eval.sh``; float32 in every study)."""
    return HeldOutSet(
        f"the file's first {records} records",
        "float32",
        runs=(_q(f"{folder}/heldout/litm-kv-retrieval-75_keys/results.json"),),
    )


def _both_lengths(
    study: str,
    folder: str,
    model: str,
    uniform: str,
    kv: tuple[str, tuple[HeldOutSet, ...]],
    litm: tuple[str, HeldOutSet],
) -> tuple[Curve, Curve]:
    """A study's chosen curve (``folder/adapter``) at its search's length (``kv``: the length and its sets) and on
    the Lost in the Middle 75-pair file (``litm``: the length and its one set)."""
    return (
        Curve(name=f"{study} (`{folder}/adapter`)", model=model, length=kv[0], uniform=uniform, sets=kv[1]),
        Curve(name=f"{study} (the same curve)", model=model, length=litm[0], uniform=uniform, sets=(litm[1],)),
    )


QWEN, SMOLLM2 = "Qwen2.5-Coder-0.5B-Instruct", "SmolLM2-135M-Instruct"
QWEN_50_PAIRS, QWEN_LITM = "KV retrieval, 50 pairs (3.4k tokens)", "Lost in the Middle 75-pair file (5.1k tokens)"

CURVES = (
    *_both_lengths(
        "GP study, trial 21",
        "search_qwen_50pairs_gp_bf16",
        QWEN,
        "uniform:1.1",
        (QWEN_50_PAIRS, _kv_sets("search_qwen_50pairs_gp_bf16", "bfloat16", fresh_records=60, greedy_records=20)),
        (QWEN_LITM, _litm_set("search_qwen_50pairs_gp_bf16", 30)),
    ),
    *_both_lengths(
        "NSGA-II study, trial 17",
        "search_qwen_50pairs",
        QWEN,
        "uniform:1.05",
        (
            QWEN_50_PAIRS,
            (
                HeldOutSet(
                    "the search's held-out split, 40 records",
                    "float32",
                    report=_q("search_qwen_50pairs/search_report.json"),
                ),
                HeldOutSet(
                    "fresh seeds 7, 8 and 9, 20 records each",
                    "float32",
                    runs=tuple(
                        _q(f"search_qwen_50pairs/heldout/{d}/results.json")
                        for d in ("fresh-seed7", "fresh-seed7-found", "fresh-seed8", "fresh-seed9")
                    ),
                ),
            ),
        ),
        (
            QWEN_LITM,
            HeldOutSet(
                "the file's first 30 records",
                "float32",
                runs=tuple(
                    _q(f"search_qwen_50pairs/heldout/{d}/results.json")
                    for d in ("litm-kv-retrieval-75_keys", "litm-kv-retrieval-75_keys-next20")
                ),
            ),
        ),
    ),
    *_both_lengths(
        "NSGA-II study, trial 163",
        "search_smollm2_10pairs",
        SMOLLM2,
        "uniform:0.9",
        (
            "KV retrieval, 10 pairs (780 tokens)",
            _kv_sets("search_smollm2_10pairs", "float32", fresh_records=40, greedy_records=10),
        ),
        ("Lost in the Middle 75-pair file (5.4k tokens)", _litm_set("search_smollm2_10pairs", 10)),
    ),
)


LENGTHS_STUDIES: dict[str, tuple[str, ...] | None] = {"search_qwen_lengths": None}
"""Studies over several record lengths (folder under ``benchmarks/results/`` -> the sets its verdict's design
names, as ``benchmarks/lengths_verdict.py --sets`` takes them; None: ``lengths_verdict.DESIGN_SETS``, the Qwen
study's) whose verdict joins the headline: every one of those sets and the study's own held-out split, per length
and over every set. A study joins once all of its verdict's sets are scored (a missing set stops this script), not
before."""


def lengths_curves(study: str, sets: list[str] | None = None, root: Path = ROOT) -> tuple[Curve, ...]:
    """The curves of a study over several lengths, as ``benchmarks/lengths_verdict.py`` pools them (``sets``:
    its verdict's sets, by default ``lengths_verdict.DESIGN_SETS``)."""
    verdict = _load_sibling("lengths_verdict")
    folder = root / RESULTS / study
    uniform = read_search_report(folder / "search_report.json")["baselines"]["best_uniform"]["uniform"]
    return verdict.curves(folder, f"uniform:{uniform:g}", sets or list(verdict.DESIGN_SETS), root)


def all_curves(
    root: Path = ROOT, lengths_studies: dict[str, tuple[str, ...] | None] | None = None
) -> tuple[Curve, ...]:
    """Every curve of the headline: :data:`CURVES` and those of the studies over several lengths
    (``lengths_studies``, by default :data:`LENGTHS_STUDIES`), each with its verdict's sets."""
    studies = LENGTHS_STUDIES if lengths_studies is None else lengths_studies
    return (*CURVES, *(c for study, sets in studies.items() for c in lengths_curves(study, sets and list(sets), root)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "pooled_headline", help="result folder (its Markdown and JSON)"
    )
    args = parser.parse_args()
    results = [evaluate_curve(c) for c in all_curves()]
    text = markdown(results)
    print(text)
    out = args.out if args.out.is_absolute() else ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    result_file = _load_sibling("result_files").result_file
    files.write_text(result_file(out, ".md"), text)
    files.write_json(result_file(out, ".json"), results, indent=1)


if __name__ == "__main__":
    main()
