"""What more gold positions per record buy: CPU seconds per record and the paired standard error per CPU-second.

A long KV-retrieval record's prefix (3.4k tokens at 50 pairs) is computed once and shared by every gold position
scored on it, so more positions per record cost less than more records. They are also worth less: two positions of
one record are not independent samples. This benchmark measures both on a real model, with intervals taken over
records (the independent unit):

1. Scoring: every record is scored at all ``--pairs`` gold positions (teacher-forced accuracy, the greedy verdict,
   and gold log-prob) for each variant (default: base, uniform 1.1 and a found adapter). A count k < pairs is the
   evenly spaced subset of those positions that ``--num-positions k`` chooses, so one pass gives every k.
2. Timing: on the first ``--timing-records`` records, the base model is scored again at each count k on its own
   (the cost of a pass at k positions; CPU seconds of this process, and wall seconds).
3. Report, per k and per difference (e.g. uniform 1.1 - base, found - uniform 1.1): the per-record mean difference,
   its standard deviation over records, the paired standard error with the records scored, and the standard error
   one CPU-hour of scoring per variant would buy at k positions per record (sd_k * sqrt(cpu_k / 3600)); lower is
   better. The ratio of that figure to k=5's has a bootstrap interval over records.

Resumable: each record's scores are appended to ``records.jsonl`` and each timing to ``timing.jsonl`` in
``--out``; a rerun skips what is there and rewrites the report (``--report-only`` skips the model).

    .venv/bin/python benchmarks/positions_per_record.py --model qwen2.5-coder-0.5b-instruct --pairs 50 \\
        --records 24 --seed 21 --variants "base,uniform:1.1,found=adapter:benchmarks/results/search_qwen_50pairs/adapter" \\
        --out benchmarks/results/positions_per_record_qwen_50pairs
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np
import torch
from machine_info import cpu_info, load_average

from rope_adapter import files
from rope_adapter.errors import RecordFileError
from rope_adapter.evaluate.evaluation import evaluate_positions, make_task_samples, prepare_samples
from rope_adapter.json_types import JsonObject
from rope_adapter.records import loads_json
from rope_adapter.scoring.intervals import bootstrap_interval
from rope_adapter.scoring.loading import load_model, resolve_dtype
from rope_adapter.scoring.tasks.base import evenly_spaced_positions
from rope_adapter.scoring.variants import check_variants, parse_variants

METRICS = ("tf_accuracy", "logprob")


class RecordRow(TypedDict):
    """One record's scores: ``scores[variant][metric]`` is a list over all positions, in ``positions`` order."""

    record: int
    record_id: str
    positions: list[int]
    scores: dict[str, dict[str, list[float]]]
    cpu_seconds: dict[str, float]
    wall_seconds: dict[str, float]


class TimingRow(TypedDict):
    """One timed pass of the base model on one record at ``count`` positions."""

    record: int
    count: int
    cpu_seconds: float
    wall_seconds: float


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file (strict JSON); a torn last line (a run killed by an older, non-atomic append) is
    dropped, any other line that is not JSON is a RecordFileError naming the file and the line."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for n, line in enumerate(lines, 1):
        try:
            rows.append(loads_json(line, path, JsonObject, field=f"line {n}"))
        except RecordFileError:
            if n == len(lines):
                break
            raise
    return rows


def append_jsonl(path: Path, row: dict) -> None:
    """Append one strict-JSON line (the file is the old one or the old one and the line, never a part)."""
    files.append_text(path, files.dumps_json(row, where=path) + "\n")


def score_pass(model, tokenizer, task, samples, variants, plans) -> tuple[dict, float, float]:
    """(scores by metric, CPU seconds, wall seconds) of one variant on one record's samples."""
    prepared = prepare_samples(samples, tokenizer, task)
    cpu, wall = time.process_time(), time.perf_counter()
    with torch.inference_mode():
        results = evaluate_positions(
            model, tokenizer, task, samples, variants, plans=plans, metrics=METRICS, progress=False, prepared=prepared
        )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    by_metric = {m: [float(r[m]) for r in results.rows] for m in METRICS}
    return by_metric, cpu, wall


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    variants = parse_variants(args.variants)
    model, tokenizer = load_model(args.model, dtype=resolve_dtype(args.dtype))
    plans = check_variants(variants, model.config)
    records = read_jsonl(args.out / "records.jsonl")
    timings = read_jsonl(args.out / "timing.jsonl")
    done = {r["record"] for r in records}
    timed = {(t["record"], t["count"]) for t in timings}
    for index in range(args.records):
        for count in args.counts if index < args.timing_records else ():
            if count == args.pairs or (index, count) in timed:
                continue
            task, samples = _record(args, index, count)
            _, cpu, wall = score_pass(model, tokenizer, task, samples, variants[:1], plans)
            append_jsonl(
                args.out / "timing.jsonl", TimingRow(record=index, count=count, cpu_seconds=cpu, wall_seconds=wall)
            )
            print(f"record {index}: {count} positions, {cpu:.1f} CPU s, {wall:.1f} s", flush=True)
        if index in done:
            continue
        task, samples = _record(args, index, args.pairs)
        row = RecordRow(
            record=index,
            record_id=samples[0].record_id,
            positions=[int(s.position) for s in samples],
            scores={},
            cpu_seconds={},
            wall_seconds={},
        )
        for variant in variants:
            scores, cpu, wall = score_pass(model, tokenizer, task, samples, [variant], plans)
            row["scores"][variant.name] = scores
            row["cpu_seconds"][variant.name] = cpu
            row["wall_seconds"][variant.name] = wall
            print(
                f"record {index}: {variant.name} at {args.pairs} positions, {cpu:.1f} CPU s, {wall:.1f} s", flush=True
            )
        append_jsonl(args.out / "records.jsonl", row)


_RECORDS: dict[int, tuple] = {}


def _record(args: argparse.Namespace, index: int, count: int):
    """Task and samples of record ``index`` of the seeded draw of ``--records`` records, at ``count`` evenly spaced
    gold positions (the draw is made once per count; record i is the same record at every count)."""
    if count not in _RECORDS:
        task, samples = make_task_samples(
            "kv_retrieval", num_samples=args.records, seed=args.seed, num_pairs=args.pairs, num_positions=count
        )
        order = list(dict.fromkeys(s.record_id for s in samples))
        _RECORDS[count] = (task, [[s for s in samples if s.record_id == rid] for rid in order])
    task, groups = _RECORDS[count]
    return task, groups[index]


# ----------------------------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------------------------


def subset_means(row: dict, variant: str, metric: str, count: int) -> float:
    """Mean of ``metric`` over the ``count`` evenly spaced gold positions of one record."""
    chosen = set(evenly_spaced_positions(len(row["positions"]), count))
    values = [v for p, v in zip(row["positions"], row["scores"][variant][metric], strict=True) if p in chosen]
    return float(np.mean(values))


def cost_per_record(timings: Sequence[dict], records: Sequence[dict], count: int, pairs: int) -> dict[str, float]:
    """Median CPU and wall seconds of one variant's pass over one record at ``count`` positions."""
    if count == pairs:
        cpu = [s for r in records for s in r["cpu_seconds"].values()]
        wall = [s for r in records for s in r["wall_seconds"].values()]
    else:
        cpu = [t["cpu_seconds"] for t in timings if t["count"] == count]
        wall = [t["wall_seconds"] for t in timings if t["count"] == count]
    if not cpu:
        return {"cpu_seconds": math.nan, "wall_seconds": math.nan, "passes": 0}
    return {"cpu_seconds": float(np.median(cpu)), "wall_seconds": float(np.median(wall)), "passes": len(cpu)}


def efficiency(diffs: np.ndarray, cpu: float) -> float:
    """Standard error of the mean difference that one CPU-hour per variant buys: sd * sqrt(cpu / 3600)."""
    return float(np.std(diffs, ddof=1) * math.sqrt(cpu / 3600.0))


def report(args: argparse.Namespace) -> dict:
    records = sorted(read_jsonl(args.out / "records.jsonl"), key=lambda r: r["record"])
    timings = read_jsonl(args.out / "timing.jsonl")
    if len(records) < 3:
        raise SystemExit(f"{len(records)} record(s) scored; the report needs 3 or more")
    names = list(records[0]["scores"])
    pairs = [tuple(p.split(",", 1)) for p in args.differences]
    for a, b in pairs:
        if a not in names or b not in names:
            raise SystemExit(f"difference {a}-{b}: variants scored are {names}")
    costs = {k: cost_per_record(timings, records, k, args.pairs) for k in args.counts}
    base_cost = costs[args.counts[0]]["cpu_seconds"]
    out: dict = {
        "model": args.model,
        "pairs": args.pairs,
        "seed": args.seed,
        "records": len(records),
        "variants": names,
        "dtype": args.dtype,
        "threads": args.threads,
        "machine": cpu_info(),
        "load_average": load_average(),
        "cost": {str(k): {**c, "relative": c["cpu_seconds"] / base_cost} for k, c in costs.items()},
        "accuracy": {name: {} for name in names},
        "differences": {},
    }
    for name in names:
        for k in args.counts:
            out["accuracy"][name][str(k)] = float(np.mean([subset_means(r, name, "tf_accuracy", k) for r in records]))
    rng_seed = 0
    for a, b in pairs:
        key = f"{a} - {b}"
        out["differences"][key] = {}
        for metric in METRICS:
            table = {}
            per_k = {
                k: np.array([subset_means(r, a, metric, k) - subset_means(r, b, metric, k) for r in records])
                for k in args.counts
            }
            full = np.array([_per_position(r, a, metric) - _per_position(r, b, metric) for r in records])
            model = _components(full, args.counts, costs, seed=rng_seed)
            for k, d in per_k.items():
                se = float(np.std(d, ddof=1) / math.sqrt(len(d)))
                table[str(k)] = {
                    "mean": float(np.mean(d)),
                    "sd_over_records": float(np.std(d, ddof=1)),
                    "se": se,
                    "t": float(np.mean(d) / se) if se > 0 else None,
                    "bootstrap_95": _bootstrap(d),
                    "se_per_cpu_hour": efficiency(d, costs[k]["cpu_seconds"]),
                    "model": model[k],
                }
            out["differences"][key][metric] = table
    return out


def _bootstrap(d: np.ndarray) -> list[float | None]:
    """95 % percentile bootstrap interval of the mean difference over records."""
    interval = bootstrap_interval(d)
    return [interval.low, interval.high]


def _per_position(row: dict, variant: str, metric: str) -> np.ndarray:
    """One record's ``metric`` at every gold position, in the row's position order."""
    return np.asarray(row["scores"][variant][metric], dtype=float)


def _components(full: np.ndarray, counts: Sequence[int], costs: dict, seed: int) -> dict[int, dict]:
    """The variance of a record's k-position mean difference from two components, and what it means per CPU-hour.

    ``full[r, p]`` is the difference at every position of record r. Between records: the variance of the records'
    all-position means (s2). Within a record: the mean over records of the variance over positions (w). A subset
    of k of the N positions has variance s2 + (w / k)(1 - k / N) (sampling without replacement), so the SE that one
    CPU-hour per variant buys at k positions is sqrt(that * cpu_k / 3600). Both components use every position of
    every record, which makes the comparison between counts far steadier than the subsets' own spread; the ratio
    to the first count has a 95 % bootstrap interval over records.
    """
    n_records, n_positions = full.shape

    def predicted(rows: np.ndarray) -> dict[int, float]:
        between = float(np.var(rows.mean(axis=1), ddof=1))
        within = float(np.mean(np.var(rows, axis=1, ddof=1)))
        return {
            k: math.sqrt((between + within / k * (1 - k / n_positions)) * costs[k]["cpu_seconds"] / 3600.0)
            for k in counts
        }

    point = predicted(full)
    rng = np.random.default_rng(seed)
    draws = [predicted(full[rng.integers(0, n_records, n_records)]) for _ in range(2000)]
    first = counts[0]
    out = {}
    for k in counts:
        ratios = [d[k] / d[first] for d in draws if d[first] > 0]
        low, high = np.percentile(ratios, [2.5, 97.5]).tolist() if ratios else [None, None]
        out[k] = {
            "se_per_cpu_hour": point[k],
            "vs_first": point[k] / point[first] if point[first] > 0 else None,
            "vs_first_95": [low, high],
            "between_records_var": float(np.var(full.mean(axis=1), ddof=1)),
            "within_record_var": float(np.mean(np.var(full, axis=1, ddof=1))),
        }
    return out


def markdown(r: dict) -> str:
    counts = list(r["cost"])
    lines = [
        f"# Gold positions per record: {r['model']}, {r['pairs']} pairs",
        "",
        f"{r['records']} fresh records (seed {r['seed']}), {r['dtype']}, {r['threads']} torch thread(s); variants "
        f"{', '.join(r['variants'])}. Teacher-forced accuracy (the greedy verdict) and gold log-prob at every "
        "position; a count k is the evenly spaced subset `--num-positions k` scores. Intervals are over records.",
        "",
        "## Cost of one variant's pass over one record",
        "",
        "| positions | CPU s (median) | wall s | relative to " + counts[0] + " | passes timed |",
        "|---|---|---|---|---|",
    ]
    for k, c in r["cost"].items():
        lines.append(
            f"| {k} | {c['cpu_seconds']:.1f} | {c['wall_seconds']:.1f} | {c['relative']:.2f} | {c['passes']} |"
        )
    lines += ["", "## Accuracy (mean over records of the per-record mean)", ""]
    lines += ["| variant | " + " | ".join(f"k={k}" for k in counts) + " |", "|---" * (len(counts) + 1) + "|"]
    for name, row in r["accuracy"].items():
        lines.append(f"| {name} | " + " | ".join(f"{row[k]:.3f}" for k in counts) + " |")
    for key, by_metric in r["differences"].items():
        for metric, table in by_metric.items():
            lines += [
                "",
                f"## {key}: {metric}",
                "",
                "| positions | mean | sd over records | paired SE | t | SE per CPU-hour (subsets) | "
                "SE per CPU-hour (components) | vs k=" + counts[0] + " [95 %] |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for k, e in table.items():
                m = e["model"]
                rr = "-" if m["vs_first"] is None else f"{m['vs_first']:.2f}"
                lo, hi = m["vs_first_95"]
                ci = "" if lo is None else f" [{lo:.2f}, {hi:.2f}]"
                t = "-" if e["t"] is None else f"{e['t']:+.2f}"
                lines.append(
                    f"| {k} | {e['mean']:+.4f} | {e['sd_over_records']:.4f} | {e['se']:.4f} | {t} | "
                    f"{e['se_per_cpu_hour']:.4f} | {m['se_per_cpu_hour']:.4f} | {rr}{ci} |"
                )
    lines += [
        "",
        "SE per CPU-hour: the standard error of the mean difference that one CPU-hour of scoring per variant would "
        "buy at k positions per record, lower is better: (subsets) from the spread of the k-position record means, "
        "(components) from the between-record and within-record variances of all positions, s2 + (w/k)(1 - k/N), "
        "which every record's every position informs (the interval of its ratio to the first count is a bootstrap "
        "over records). Wall seconds are not comparable across rows when other work shares the cores; CPU seconds "
        "of this process are the cost.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--pairs", type=int, default=50, help="key-value pairs per record (all are scored)")
    parser.add_argument("--records", type=int, default=24)
    parser.add_argument("--seed", type=int, default=21, help="seed of the fresh records (not a search's seed)")
    parser.add_argument("--variants", default="base,uniform:1.1")
    parser.add_argument(
        "--differences", nargs="+", default=["uniform:1.1,base"], help="A,B: report A - B (variant names)"
    )
    parser.add_argument("--counts", type=int, nargs="+", default=[5, 10, 25, 50])
    parser.add_argument("--timing-records", type=int, default=3, help="records also timed at each smaller count")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report-only", action="store_true", help="write the report from the files in --out")
    args = parser.parse_args(argv)
    if args.counts[-1] != args.pairs or sorted(args.counts) != args.counts:
        parser.error("--counts must be increasing and end at --pairs (every position is scored)")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run(args)
    result = report(args)
    files.write_json(args.out / "positions_per_record.json", result)
    files.write_text(args.out / "positions_per_record.md", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    sys.exit(main())
