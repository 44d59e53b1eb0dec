"""Paired differences between variants scored by two `rope-adapter eval` runs on the same samples.

Two runs with the same task, seed and record count score the same samples, so a variant added later (the found
adapter) can be compared with variants scored earlier without scoring them again. Samples are matched by
(record id, gold position); the difference of each metric is paired by record (each record's mean over its gold
positions, then a t interval over records): ``rope_adapter.scoring.paired.paired_difference``, the rule the
search's held-out report uses.

    .venv/bin/python benchmarks/pair_eval_results.py NEW/results.json found OLD/results.json base uniform:1.05
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rope_adapter.scoring.numbers import fmt, fmt_interval
from rope_adapter.scoring.paired import paired_difference


def scores(path: Path, variant: str, metric: str) -> dict[tuple[str, int], float]:
    rows = [s for s in json.loads(path.read_text())["samples"] if s["variant"] == variant]
    if not rows:
        raise SystemExit(f"{path}: no samples of variant {variant!r}")
    return {(s["record_id"], int(s["position"])): float(s[metric]) for s in rows if s.get(metric) is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("new", type=Path)
    parser.add_argument("variant")
    parser.add_argument("old", type=Path)
    parser.add_argument("references", nargs="+")
    parser.add_argument("--metrics", default="tf_accuracy,logprob")
    parser.add_argument("--out", type=Path, help="write the table here (Markdown) and beside it as JSON")
    args = parser.parse_args()
    lines = [
        f"# `{args.variant}` ({args.new}) against {', '.join(f'`{r}`' for r in args.references)} ({args.old})",
        "",
        "Matched by (record, gold position); differences paired by record, 95 % t interval over records.",
        "",
        "| metric | comparison | samples | records | by position | mean [95 % CI] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    data = []
    for metric in args.metrics.split(","):
        new = scores(args.new, args.variant, metric)
        for ref in args.references:
            old = scores(args.old, ref, metric)
            keys = sorted(set(new) & set(old))
            if not keys:
                raise SystemExit(f"no common samples between {args.variant!r} and {ref!r}")
            d = paired_difference(
                np.array([new[k] for k in keys]),
                np.array([old[k] for k in keys]),
                np.array([p for _, p in keys]),
                [r for r, _ in keys],
            )
            mean = d["mean"]
            per = {int(p): v["diff"] for p, v in d["by_position"].items()}
            text = " / ".join(f"{p}: {fmt(v, sign=True)}" for p, v in per.items())
            lines.append(
                f"| {metric} | {args.variant} - {ref} | {len(keys)} | {mean['n_records']} | {text} | "
                f"{fmt_interval(mean['diff'], mean['ci_low'], mean['ci_high'], sign=True)} | {mean['verdict']} |"
            )
            data.append(
                {
                    "metric": metric,
                    "variant": args.variant,
                    "reference": ref,
                    "samples": len(keys),
                    "records": mean["n_records"],
                    "by_position": per,
                    "mean": mean["diff"],
                    "ci_low": mean["ci_low"],
                    "ci_high": mean["ci_high"],
                    "verdict": mean["verdict"],
                }
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
