"""The verdict of a search over several record lengths: base, the best uniform factor and the found curve on every
held-out set, one estimate per length pooled over every set at that length, and one over every set.

The sets (``benchmarks/verdict_qwen_lengths.sh`` writes them under ``STUDY/verdict/``; none is used by the search,
its confirmation or its held-out split):

- ``gen-<pairs>/<variant>/results.json``: generated records, one ``rope-adapter eval`` run per variant (``base``,
  ``uniform``, ``found``) on the same records;
- ``litm-<keys>/<variant>/results.json``: a Lost in the Middle file's records, the same way;
- ``greedy-<pairs>/results.json``: greedy decoding on a few records of a generated set, all three variants;
- the study's own held-out split (``search_report.json``), per searched length and, in the pooled row over every
  set, as one set (each record's mean over both lengths).

Teacher-forced accuracy (every answer token is the model's argmax: greedy decoding's verdict); each comparison is
paired by record, with a 95 % t interval over records (``benchmarks/pooled_headline.py``'s exact pooling from
per-set summaries) and, per set, the bootstrap interval and the differences by gold position
(``rope-adapter compare``, :mod:`rope_adapter.evaluate.pooling`). Every set that the design names must be there: a missing one is an error,
not a smaller pool, so that no set is dropped after it is seen.

    .venv/bin/python benchmarks/lengths_verdict.py benchmarks/results/search_qwen_lengths
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rope_adapter.cli.demo import read_search_report
from rope_adapter.evaluate import pooling as pairing
from rope_adapter.evaluate.evaluation import load_results

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("base", "uniform", "found")
DESIGN_SETS = ("gen-50", "gen-75", "gen-100", "litm-75", "litm-140")
"""The sets the Qwen study's design names (its README): generated records at 50, 75 and 100 pairs, and the Lost in
the Middle 75- and 140-key files."""


def _sibling(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


headline = _sibling("pooled_headline")


def set_runs(verdict: Path, name: str) -> tuple[str, ...]:
    """The results.json of every variant of set ``name``; SystemExit naming what is missing."""
    runs = [verdict / name / v / "results.json" for v in VARIANTS]
    missing = [str(p) for p in runs if not p.is_file()]
    if missing:
        raise SystemExit(f"set {name!r} is incomplete: missing {', '.join(missing)} (run the verdict script)")
    return tuple(str(p) for p in runs)


def _length(name: str) -> tuple[str, int]:
    """``"gen-50"`` -> ``("gen", 50)``; SystemExit for a name of another form."""
    kind, _, n = name.partition("-")
    if kind not in ("gen", "litm") or not n.isdigit():
        raise SystemExit(f"set {name!r}: expected gen-<pairs> or litm-<keys>")
    return kind, int(n)


def _named(path: Path, root: Path) -> str:
    """``path`` as a result file names it: relative to the repository root when under it (no local path)."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def curves(study: Path, uniform: str, names: list[str], root: Path = ROOT) -> tuple[Any, ...]:
    """One Curve per length and one over every set, as ``pooled_headline`` pools them (``study`` absolute; its
    files named relative to ``root`` when under it). A length's sets: the study's held-out split at that length (a
    searched one), ``gen-<pairs>`` and ``litm-<keys>`` of equal count."""
    HeldOutSet, Curve = headline.HeldOutSet, headline.Curve
    report_path = study / "search_report.json"
    report = read_search_report(report_path)
    report_name = _named(report_path, root)
    dtype = str(report["settings"]["dtype"])
    # the model as its Hub id names it ("Qwen2.5-Coder-0.5B-Instruct"), as the headline's other curves do
    model = str(report["model"].get("base_model_name_or_path") or report["model"]["name"]).rsplit("/", 1)[-1]
    pairs = report["task"]["pairs"]
    searched = [int(p) for p in (pairs if isinstance(pairs, list) else [pairs])]
    title = (
        f"study over {' and '.join(map(str, searched))} pairs, trial {report['chosen']['number']} "
        f"(`{study.name}/adapter`)"
    )
    rows: dict[int, list[Any]] = {}
    for n in searched:
        split = HeldOutSet(f"the study's held-out split at {n} pairs", dtype, report=report_name, length=n)
        rows.setdefault(n, []).append(split)
    every = [HeldOutSet("the study's held-out split, every searched length", dtype, report=report_name)]
    for name in names:
        kind, n = _length(name)
        label = f"fresh records, seed 31, {n} pairs" if kind == "gen" else f"Lost in the Middle {n}-key file"
        runs = tuple(_named(Path(p), root) for p in set_runs(study / "verdict", name))
        rows.setdefault(n, []).append(HeldOutSet(label, dtype, runs=runs))
        every.append(rows[n][-1])
    out = [
        Curve(
            name=title,
            model=model,
            length=f"KV retrieval, {n} pairs ({'searched' if n in searched else 'not searched'})",
            uniform=uniform,
            sets=tuple(sets),
        )
        for n, sets in sorted(rows.items())
    ]
    return (*out, Curve(name=title, model=model, length="every set", uniform=uniform, sets=tuple(every)))


def _compare(pooled: Any, variant: str, reference: str, metric: str) -> dict[str, Any]:
    """``pooling.compare`` with its gold positions as JSON keys."""
    row = pairing.compare(pooled, variant, reference, metric)
    row["by_position"] = {str(p): v for p, v in row["by_position"].items()}
    return row


def per_set_rows(verdict: Path, uniform: str, names: list[str]) -> list[dict[str, Any]]:
    """Each set's comparisons with bootstrap intervals and differences by gold position."""
    rows = []
    for name in names:
        pooled = pairing.load_runs([Path(p) for p in set_runs(verdict, name)])
        for variant, reference in (("found", uniform), ("found", "base"), (uniform, "base")):
            rows.append({"set": name, **_compare(pooled, variant, reference, "tf_accuracy")})
    return rows


def greedy_rows(verdict: Path, uniform: str) -> list[dict[str, Any]]:
    """Each greedy run: real greedy accuracy by variant, its agreement with the teacher-forced verdict, and the
    greedy found - best uniform difference."""
    rows = []
    for path in sorted(verdict.glob("greedy-*/results.json")):
        samples = load_results(path)["samples"]
        agree = {v: [] for v in dict.fromkeys(s["variant"] for s in samples)}
        for s in samples:
            agree[s["variant"]].append(float(s["accuracy"]) == float(s["tf_accuracy"]))
        pooled = pairing.load_runs([path])
        diff = _compare(pooled, "found", uniform, "accuracy")
        rows.append(
            {
                "set": path.parent.name,
                "agreement": {v: [int(np.sum(a)), len(a)] for v, a in agree.items()},
                "accuracy": {v: float(np.mean([s["accuracy"] for s in samples if s["variant"] == v])) for v in agree},
                "found - best uniform": diff,
            }
        )
    return rows


def markdown(pooled: list[dict[str, Any]], sets: list[dict[str, Any]], greedy: list[dict[str, Any]]) -> str:
    header, rule = pairing.TABLE_HEADER.split("\n")
    lines = [headline.markdown(pooled).rstrip("\n"), "", "## Each set: bootstrap intervals and gold positions", ""]
    lines += [f"| set {header}", f"|---{rule}", *(f"| {r['set']} {pairing.table_row(r)}" for r in sets)]
    if greedy:
        lines += ["", "## Greedy decoding", ""]
        lines.append(
            "| set | greedy accuracy | agrees with the teacher-forced verdict | found - best uniform (greedy) |"
        )
        lines.append("|---|---|---|---|")
        for g in greedy:
            d = g["found - best uniform"]
            cells = [
                g["set"],
                ", ".join(f"{v} {headline.fmt(a)}" for v, a in g["accuracy"].items()),
                ", ".join(f"{v} {n}/{t}" for v, (n, t) in g["agreement"].items()),
                headline.fmt_interval(d["mean"], d["ci_low"], d["ci_high"], sign=True),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", type=Path, help="the study's folder (search_report.json, adapter/, verdict/)")
    parser.add_argument(
        "--sets", nargs="+", default=list(DESIGN_SETS), help=f"the sets, all required (default {' '.join(DESIGN_SETS)})"
    )
    parser.add_argument("--out", type=Path, help="result folder (default: STUDY/verdict/verdict)")
    args = parser.parse_args(argv)
    study = args.study.resolve()
    report = read_search_report(study / "search_report.json")
    uniform = f"uniform:{report['baselines']['best_uniform']['uniform']:g}"
    results = [headline.evaluate_curve(c) for c in curves(study, uniform, args.sets)]
    sets = per_set_rows(study / "verdict", uniform, args.sets)
    greedy = greedy_rows(study / "verdict", uniform)
    out = args.out or study / "verdict" / "verdict"
    data = {"uniform": uniform, "pooled": results, "sets": sets, "greedy": greedy}
    _sibling("result_files").write_summary(out, data, markdown(results, sets, greedy), indent=1)


if __name__ == "__main__":
    main()
