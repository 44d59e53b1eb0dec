"""Which sampler (and which score) should a search use by default? The same budget in forward passes per arm.

Each arm is ``SAMPLER:SCORE`` (e.g. ``gp:answer``) and runs `rope_adapter.search.run_search` once per seed with
the same task, records and budget (``--max-records`` scored search records per study, racing on), only the
sampler, its seed and the score differing. Each run's own held-out step scores the base, the best uniform factor
and the found curve on the same held-out records (teacher-forced accuracy, paired by record, t intervals), so
every arm is judged on records no search saw, in the benchmark's metric.

Resumable: a finished run (its ``search_report.json`` has a held-out section) is read back, not run again.
Writes ``<out>/<out name>.json`` and ``.md`` beside the runs' folders.

    .venv/bin/python benchmarks/samplers.py --arms nsga2:answer gp:answer tpe:answer --seeds 0 1 2 \\
        --out benchmarks/results/samplers_smollm2_10pairs

With ``--dtype bfloat16`` every search and held-out step runs in bfloat16 (on a CPU with AMX several times faster;
``benchmarks/results/dtype_agreement_qwen_50pairs/`` measures it on Qwen and compares the verdicts with float32).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from machine_info import environment
from racing import _interval, add_budget_flags, budget_settings, summarise
from result_files import write_summary
from scipy import stats

from rope_adapter.cli.demo import read_search_report
from rope_adapter.scoring.numbers import fmt
from rope_adapter.search import SearchSettings, run_search


def run_arm(base: SearchSettings, arm: str, seed: int, out: Path, report_only: bool = False) -> dict | None:
    """The summary of one arm's run for one seed: read back when it has finished, else run (None with
    ``report_only``)."""
    sampler, score = arm.split(":")
    folder = out / f"{sampler}-{score}-seed{seed}"
    report_path = folder / "search_report.json"
    if report_path.is_file():
        report = read_search_report(report_path)
        if report.get("holdout"):
            return {**summarise(report, str(folder), (report.get("chosen") or {}).get("number")), "seconds": None}
    if report_only:
        return None
    settings = base.updated(sampler=sampler, score=score, seed=seed, out=str(folder))
    start = time.perf_counter()
    result = run_search(settings)
    summary = summarise(result.report, str(result.out_dir), result.chosen_trial)
    return {**summary, "seconds": time.perf_counter() - start}


def over_seeds_summary(by_seed: dict, other: str) -> dict:
    """found - other over seeds: the mean of the seeds' held-out differences with a t interval over seeds, and how
    many seeds' own paired intervals lie above (wins) or below (losses) 0."""
    diffs = [d for d in (found_minus(r, other) for r in by_seed.values()) if d and d.get("diff") is not None]
    values = np.array([d["diff"] for d in diffs], dtype=float)
    difference = None
    if len(values):
        mean = float(values.mean())
        half = (
            float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))
            if len(values) > 1
            else float("nan")
        )
        difference = {"diff": mean, "ci_low": mean - half, "ci_high": mean + half}
    return {
        "seeds": len(values),
        "difference": difference,
        "wins": sum(1 for d in diffs if d["ci_low"] > 0),
        "losses": sum(1 for d in diffs if d["ci_high"] < 0),
    }


def found_minus(arm_run: dict, other: str) -> dict | None:
    report = read_search_report(Path(arm_run["out"]) / "search_report.json")
    diff = ((report.get("holdout") or {}).get("differences", {}).get(f"found-{other}") or {}).get("tf_accuracy")
    return (diff or {}).get("mean")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_budget_flags(parser, holdout_records=40, max_records=300)
    parser.add_argument("--num-positions", type=int, default=5)
    parser.add_argument("--arms", nargs="+", default=["nsga2:answer", "gp:answer", "tpe:answer"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--report-only", action="store_true", help="run nothing: summarise the finished runs")
    parser.add_argument(
        "--dtype",
        default="auto",
        help="the searches' and held-out steps' dtype (bfloat16: several times faster on AMX)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/samplers_smollm2_10pairs"), help="result folder"
    )
    args = parser.parse_args()
    base = budget_settings(args)
    runs = {
        arm: {seed: run_arm(base, arm, seed, args.out, args.report_only) for seed in args.seeds} for arm in args.arms
    }
    runs = {arm: {s: r for s, r in by_seed.items() if r is not None} for arm, by_seed in runs.items()}
    results = {
        "model": args.model,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "runs": {arm: {str(s): r for s, r in by_seed.items()} for arm, by_seed in runs.items()},
        "environment": environment(),
    }
    write(results, runs, args)


def write(results: dict, runs: dict, args: argparse.Namespace) -> None:
    out = args.out
    lines = [
        f"# Samplers and scores at the same budget: {args.model}, {args.pairs} pairs",
        "",
        f"{args.search_records} search records x {args.num_positions} positions, budget {args.max_records} scored search records per "
        f"study (racing on), population {args.population} (NSGA-II), uniform baselines {args.uniform}; seeds "
        f"{' '.join(map(str, args.seeds))}; dtype {args.dtype}. Held-out: the same {args.holdout_records} other records for every run; "
        "teacher-forced accuracy (mean over gold positions), paired by record, 95 % t intervals.",
        "",
        "| arm | seed | trials | scored records | held-out: found | base | best uniform | found - base | "
        "found - best uniform |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    means = {}
    for arm, by_seed in runs.items():
        found_values = []
        for seed, r in by_seed.items():
            hold = r["holdout"]
            found_values.append((hold.get("found") or {}).get("tf_accuracy"))
            lines.append(
                f"| {arm} | {seed} | {r['trials']} | {r['racing']['records_scored']} | "
                f"{fmt((hold.get('found') or {}).get('tf_accuracy'))} | {fmt((hold.get('base') or {}).get('tf_accuracy'))} "
                f"| {fmt((hold.get('best_uniform') or {}).get('tf_accuracy'))} | {_interval(found_minus(r, 'base'))} | "
                f"{_interval(found_minus(r, 'best_uniform'))} |"
            )
        vals = [v for v in found_values if v is not None]
        means[arm] = float(np.mean(vals)) if vals else None
    lines += ["", "Mean held-out teacher-forced accuracy of the found curve over seeds:", ""]
    for arm, m in sorted(means.items(), key=lambda kv: -(kv[1] or -1)):
        lines.append(f"- {arm}: {fmt(m)}")
    results["mean_found_tf_accuracy"] = means
    over_seeds = {
        arm: {other: over_seeds_summary(by_seed, other) for other in ("base", "best_uniform")}
        for arm, by_seed in runs.items()
    }
    results["over_seeds"] = over_seeds
    lines += [
        "",
        "Held-out difference of the found curve, over seeds (mean of the seeds' differences, 95 % t interval over "
        "seeds; wins / losses: seeds whose own paired interval lies above / below 0):",
        "",
        "| arm | seeds | found - base | wins / losses | found - best uniform | wins / losses |",
        "|---|---|---|---|---|---|",
    ]
    for arm, by_other in over_seeds.items():
        cells = []
        for other in ("base", "best_uniform"):
            o = by_other[other]
            cells += [_interval(o["difference"]), f"{o['wins']} / {o['losses']}"]
        lines.append(f"| {arm} | {by_other['base']['seeds']} | " + " | ".join(cells) + " |")
    write_summary(out, results, "\n".join(lines) + "\n", indent=2, default=str)


if __name__ == "__main__":
    main()
