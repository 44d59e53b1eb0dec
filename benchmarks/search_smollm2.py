"""A real factor search on SmolLM2-135M-Instruct within a wall-clock budget, with its held-out comparison.

KV retrieval (Lost in the Middle format, generated 20-pair records, raw prompt), gold log-prob of the first k=4
answer tokens at 5 gold positions, search records and other (held-out) records drawn by a seeded split. The whole
run (model load, search, held-out scoring of base / best uniform / found factors) is kept within --budget-minutes:
the search stops starting trials when the measured trial cost says the held-out evaluation would not fit.

Writes JSON and Markdown into the search's own output folder:

    benchmarks/results/search_smollm2[_LABEL]/search_smollm2[_LABEL].json / .md   this summary
    benchmarks/results/search_smollm2[_LABEL]/        adapter/, search_report.json/.md, *.png, study.db
    benchmarks/results/search_smollm2_overhead/search_smollm2_overhead.json      --overhead-only

    .venv/bin/python benchmarks/search_smollm2.py [--budget-minutes 20] [--label NAME] [--search-records 6] ...
    .venv/bin/python benchmarks/search_smollm2.py --overhead-only     # trial cost vs bare forward passes

A run with the same label resumes its study (the budget applies to each run); use a new label for a new study.

``--overhead-only`` measures what a trial costs beyond the forward passes it needs: one trial's scoring of the
search set (factors swapped in, shared-prefix log-probs of the first k answer tokens) against the bare model
(adapter disabled) scoring the same samples the same way, and against the shared-prefix passes alone,
interleaved, the minimum of --repeats each; then one more trial split into prefix passes, continuation passes
(the queries and answers against the shared cache) and the cache selection inside them.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import torch
from machine_info import cpu_info, load_average
from result_files import result_file, write_summary

from rope_adapter import files
from rope_adapter.search import SearchSettings, run_search


def measure_overhead(settings: SearchSettings, repeats: int) -> dict:
    """Seconds of one trial's scoring vs the forward passes it needs (see the module docstring)."""
    import numpy as np

    from rope_adapter.scoring import prefix_cache
    from rope_adapter.scoring import shared_prefix as scoring
    from rope_adapter.search.worker import make_worker

    worker = make_worker(settings, 0, with_holdout=False)
    task = worker.search
    evaluator = worker.evaluator
    groups = task.logprob_groups
    batches = [groups[i : i + settings.model.batch_size] for i in range(0, len(groups), settings.model.batch_size)]
    factors = np.linspace(1.0, 1.1, worker.num_layers)

    def bare_prefix() -> float:
        start = time.perf_counter()
        with torch.inference_mode(), worker.model.disable_adapter():
            for batch in batches:
                seqs = [task.full_ids[g.members[0]][: g.shared] for g in batch]
                width = max(len(q) for q in seqs)
                ids = torch.full((len(seqs), width), task.pad_token_id)
                mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for row, q in enumerate(seqs):
                    ids[row, width - len(q) :] = torch.tensor(q)
                    mask[row, width - len(q) :] = 1
                worker.model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        return time.perf_counter() - start

    def bare_scoring() -> float:
        start = time.perf_counter()
        with torch.inference_mode(), worker.model.disable_adapter():
            scoring.token_logprobs(
                worker.model, task, batch_size=evaluator.batch_size, max_batch_tokens=evaluator.max_batch_tokens
            )
        return time.perf_counter() - start

    trial_times, scoring_times, prefix_times = [], [], []
    for _ in range(repeats):
        trial_times.append(evaluator.score(factors, task).seconds)
        scoring_times.append(bare_scoring())
        prefix_times.append(bare_prefix())

    # where a trial's time goes: wrap the scoring module's three steps for one more trial
    spent = {"prefix_passes": 0.0, "continuation_passes": 0.0, "cache_selection": 0.0}
    steps = {
        (scoring, "prefix_pass"): "prefix_passes",
        (scoring, "_score_chunk"): "continuation_passes",
        (prefix_cache, "_select_cache"): "cache_selection",
    }
    originals = {step: getattr(*step) for step in steps}

    def timed(step: tuple):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return originals[step](*args, **kwargs)
            finally:
                spent[steps[step]] += time.perf_counter() - start

        return wrapper

    try:
        for step in steps:
            setattr(*step, timed(step))
        profiled = evaluator.score(factors, task).seconds
    finally:
        for (module, name), fn in originals.items():
            setattr(module, name, fn)
    trial, bare = min(trial_times), min(scoring_times)
    return {
        "trial_seconds": trial,
        "bare_scoring_seconds": bare,
        "ratio": trial / bare,
        "bare_prefix_seconds": min(prefix_times),
        "breakdown_seconds": {
            "trial": profiled,
            **spent,
            "continuation_forwards_without_cache_selection": spent["continuation_passes"] - spent["cache_selection"],
            "rest": profiled - spent["prefix_passes"] - spent["continuation_passes"],
        },
        "all_trial_seconds": trial_times,
        "all_bare_scoring_seconds": scoring_times,
        "all_bare_prefix_seconds": prefix_times,
        "records": settings.search_records,
        "samples": len(task),
        "tokens": task.token_counts(),
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget-minutes", type=float, default=20.0, help="whole-run budget (default 20)")
    p.add_argument("--label", default="", help="suffix of the output names (a new label = a new study)")
    p.add_argument("--search-records", type=int, default=6)
    p.add_argument("--holdout-records", type=int, default=12)
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument(
        "--k", type=lambda t: None if t == "all" else int(t), default=4, help="answer tokens scored, or 'all'"
    )
    p.add_argument("--s-min", type=float, default=0.9)
    p.add_argument("--s-max", type=float, default=1.2)
    p.add_argument("--uniform", type=float, nargs="*", default=[0.95, 1.05, 1.1])
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default: 1.6x faster than float32 here) or float32")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    p.add_argument(
        "--overhead-only", action="store_true", help="only measure a trial's cost vs the bare forward passes it needs"
    )
    p.add_argument("--repeats", type=int, default=3, help="repeats of the overhead measurement")
    args = p.parse_args(argv)

    name = "search_smollm2" + (f"_{args.label}" if args.label else "")
    out = args.results / name
    args.results.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    settings = SearchSettings.flat(
        model="smollm2-135m-instruct",
        task="kv-retrieval",
        pairs=args.pairs,
        search_records=args.search_records,
        holdout_records=args.holdout_records,
        data_seed=args.data_seed,
        score="logprob",
        k=args.k,
        s_min=args.s_min,
        s_max=args.s_max,
        uniform=tuple(args.uniform),
        population=args.population,
        seed=args.seed,
        trials=None,
        budget=args.budget_minutes * 60,
        device="cpu",
        dtype=args.dtype,
        batch_size=args.batch_size,
        threads=args.threads,
        study=name,
        out=str(out),
        progress=True,
    )
    if args.overhead_only:
        load_before = load_average()
        overhead = measure_overhead(settings, args.repeats)
        overhead.update(load_average_before=load_before, load_average_after=load_average(), machine=cpu_info())
        folder = args.results / "search_smollm2_overhead"
        folder.mkdir(parents=True, exist_ok=True)
        files.write_json(result_file(folder, ".json"), overhead, indent=1)
        print(files.dumps_json(overhead, indent=1))
        return 0
    start = time.time()
    load_before = load_average()
    result = run_search(settings)
    wall = time.time() - start
    report = result.report
    holdout = report.get("holdout") or {}
    timing = report["timing"]
    summary = {
        "benchmark": "search_smollm2",
        "command": "python "
        + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "wall_seconds": wall,
        "budget_seconds": settings.study.budget,
        "within_budget": wall <= settings.study.budget,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "machine": cpu_info(),
        "settings": report["settings"],
        "study": report["study"],
        "timing": timing,
        "search_set": {
            "base": report["baselines"]["base"],
            "best_uniform": report["baselines"]["best_uniform"],
            "found": report["chosen"],
            "comparison": report["search_comparison"],
        },
        "holdout": holdout,
        "verdict": holdout.get("verdict"),
        "outputs": str(out),
    }
    md = [
        f"# {name}: factor search on SmolLM2-135M-Instruct",
        "",
        f"Command: `{summary['command']}`",
        "",
        f"- wall time {wall / 60:.1f} min (budget {settings.study.budget / 60:.0f} min); machine: "
        f"{summary['machine'].get('cpu_model', '?')}, {args.threads} torch threads, {settings.model.dtype}; "
        f"load average before/after {load_before} / {summary['load_average_after']} "
        + (
            f"(above the search's own {args.threads} threads: other jobs shared the cores, timings are pessimistic)"
            if max((load_before or [0])[0], (summary["load_average_after"] or [0])[0]) > args.threads + 1
            else "(the search's own threads, no other load worth naming)"
        ),
        f"- {report['study']['complete']} trials ({report['study']['evaluated']} scored, "
        f"{report['study']['infeasible']} infeasible, not scored); "
        f"{timing['trials_per_minute_this_run']:.2f} trials/min, "
        f"{timing['median_eval_seconds']:.1f} s per scored trial, "
        f"{timing['seconds_per_scored_sample']:.2f} s per scored sample "
        f"({timing['search_samples']} samples = {settings.search_records} records x 5 positions, one shared prefix "
        "per record)",
        "",
        Path(result.out_dir / "search_report.md").read_text().split("\n", 2)[2],
    ]
    write_summary(out, summary, "\n".join(md), indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
