"""Search sample efficiency: plain NSGA-II against racing, on the same seeds and the same budget in forward passes.

Both arms run `rope_adapter.search.run_search` with the same settings and seed; the only difference is `race`
(racing: checks after 20 % and 50 % of the search records; plain: every trial scored on every record). The budget
is `--max-records` search records scored per study (one prefix forward pass each), so racing spends what it saves
on more trials. Each arm reports the held-out score and teacher-forced accuracy its chosen adapter reaches.

Then the racing study is replayed with full scoring: every trial racing stopped is scored on all search records,
and the choice is made again on full scores. The report says whether racing picked the same trial, and how many
forward passes it saved.

Writes JSON and Markdown into its result folder (default benchmarks/results/racing_<model>/racing_<model>.{json,md})
beside both study folders (plain/, racing/).

    .venv/bin/python benchmarks/racing.py --model smollm2-135m-instruct --pairs 10 --search-records 20 \\
        --holdout-records 20 --max-records 1200
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from machine_info import environment
from result_files import RESULTS, write_summary

from rope_adapter.scoring.logprobs import position_means
from rope_adapter.scoring.numbers import fmt, fmt_interval
from rope_adapter.search import SearchSettings, run_search
from rope_adapter.search.selection import choose, trial_record
from rope_adapter.search.storage_url import open_storage
from rope_adapter.search.worker import make_worker


def summarise(report: dict, out_dir: str, chosen_trial: int | None) -> dict:
    """One arm's numbers, from its ``search_report.json`` dict (what ``run_search`` wrote)."""
    holdout = report.get("holdout") or {}
    configs = holdout.get("configs", {})
    found_base = holdout.get("differences", {}).get("found-base") or {}
    return {
        "out": str(out_dir),
        "trials": report["study"]["complete"],
        "racing": report["study"]["racing"],
        "chosen_trial": chosen_trial,
        "search_objectives": (report.get("chosen") or {}).get("objectives"),
        "holdout": {
            name: {"mean": cfg.get("mean"), "tf_accuracy": cfg.get("tf_accuracy")} for name, cfg in configs.items()
        },
        "holdout_score_found_minus_base": found_base.get("mean"),
        "holdout_tf_accuracy_found_minus_base": (found_base.get("tf_accuracy") or {}).get("mean"),
        "holdout_whole_answer_found_minus_base": (found_base.get("whole_answer") or {}).get("mean"),
        "verdict": holdout.get("verdict"),
    }


def _interval(diff: dict | None) -> str:
    if not diff:
        return "n/a"
    return fmt_interval(diff.get("diff"), diff.get("ci_low"), diff.get("ci_high"), sign=True)


def replay(settings: SearchSettings) -> dict:
    """Score the stopped trials of a raced study in full and choose again."""
    import optuna

    worker = make_worker(settings, 0, with_holdout=False)
    study = optuna.load_study(study_name=settings.study.name, storage=open_storage(settings.storage_url()))
    records = [trial_record(t) for t in study.get_trials(deepcopy=False)]
    spec = settings.objective_spec()
    raced_choice, _, _ = choose(records, spec, settings.objective.select)
    start = time.perf_counter()
    replayed = 0
    for record in records:
        if not record.get("raced_out"):
            continue
        scored = worker.evaluator.score(record["factors"], worker.search)
        by_position = position_means(worker.search.positions, scored.per_sample)
        record.update(
            raced_out=False,
            by_position={str(p): v for p, v in by_position.items()},
            objectives=spec.summary(by_position),
        )
        replayed += 1
    full_choice, _, _ = choose(records, spec, settings.objective.select)
    return {
        "replayed_trials": replayed,
        "seconds": time.perf_counter() - start,
        "raced_choice": None if raced_choice is None else raced_choice["number"],
        "full_scoring_choice": None if full_choice is None else full_choice["number"],
        "same_trial": (raced_choice or {}).get("number") == (full_choice or {}).get("number"),
        "full_choice_objectives": None if full_choice is None else full_choice["objectives"],
    }


def add_budget_flags(parser: argparse.ArgumentParser, holdout_records: int, max_records: int) -> None:
    """The flags :func:`budget_settings` reads (racing.py and samplers.py differ only in two defaults)."""
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--search-records", type=int, default=20)
    parser.add_argument("--holdout-records", type=int, default=holdout_records)
    parser.add_argument("--max-records", type=int, default=max_records, help="search records scored per study (budget)")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--uniform", type=float, nargs="*", default=[0.9, 1.1])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")


def budget_settings(args: argparse.Namespace) -> SearchSettings:
    """The search settings of a benchmark that gives each arm a budget in scored records (``--max-records``)."""
    return SearchSettings.flat(
        model=args.model,
        pairs=args.pairs,
        num_positions=getattr(args, "num_positions", 5),
        search_records=args.search_records,
        holdout_records=args.holdout_records,
        trials=None,
        timeout=24 * 3600.0,
        max_records=args.max_records,
        population=args.population,
        sampler="nsga2",  # this benchmark measures racing under the paper's sampler (samplers.py sets its own)
        uniform=tuple(args.uniform),
        seed=getattr(args, "seed", 0),
        threads=args.threads,
        dtype=getattr(args, "dtype", "auto"),
        progress=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_budget_flags(parser, holdout_records=20, max_records=1200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="result folder")
    args = parser.parse_args()

    slug = Path(args.model).name.lower()
    out = args.out or RESULTS / f"racing_{slug}"
    base = budget_settings(args)
    arms = {}
    for name, race in (("racing", (0.2, 0.5)), ("plain", ())):
        settings = base.updated(race=race, out=str(out / name))
        start = time.perf_counter()
        result = run_search(settings)
        summary = summarise(result.report, str(result.out_dir), result.chosen_trial)
        arms[name] = {**summary, "seconds": time.perf_counter() - start}
    raced_settings = base.updated(race=(0.2, 0.5), out=str(out / "racing"))
    results = {
        "model": args.model,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "arms": arms,
        "replay": replay(raced_settings),
        "environment": environment(),
    }
    write(results, out)


def write(results: dict, out: Path) -> None:
    """``<out>/<out name>.json`` and ``.md`` from the results dict."""
    args = results["settings"]
    arms = results["arms"]
    md = [
        f"# Racing vs plain NSGA-II: {results['model']}, {args['pairs']} pairs",
        "",
        f"{args['search_records']} search records x 5 positions, budget {args['max_records']} scored search records "
        f"per study (one prefix forward pass each), population {args['population']}, seed {args['seed']}, uniform "
        f"baselines {args['uniform']}. Held-out: {args['holdout_records']} other records.",
        "",
        "| arm | trials | scored records | saved | held-out tf-accuracy: found | base | found - base [95 % CI] "
        "| found - base, whole-answer log-prob per token [95 % CI] | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, arm in arms.items():
        hold = arm["holdout"]
        md.append(
            f"| {name} | {arm['trials']} | {arm['racing']['records_scored']} | "
            f"{arm['racing']['saved_fraction']:.0%} | {fmt((hold.get('found') or {}).get('tf_accuracy'))} | "
            f"{fmt((hold.get('base') or {}).get('tf_accuracy'))} | "
            f"{_interval(arm['holdout_tf_accuracy_found_minus_base'])} | "
            f"{_interval(arm['holdout_whole_answer_found_minus_base'])} | {arm.get('seconds', 0):.0f} |"
        )
    rep = results["replay"]
    md += [
        "",
        f"Replay of the racing study with full scoring: {rep['replayed_trials']} stopped trials rescored "
        f"({rep['seconds']:.0f} s); racing chose trial {rep['raced_choice']}, full scoring chooses trial "
        f"{rep['full_scoring_choice']} ({'the same' if rep['same_trial'] else 'a different one'}).",
        "",
    ]
    write_summary(out, results, "\n".join(md), indent=2, default=str)


if __name__ == "__main__":
    main()
