"""`rope-adapter search`: find per-layer RoPE factors with a constrained Bezier + NSGA-II search (Optuna).

Every flag maps to a field of ``rope_adapter.search.SearchSettings`` and shows that field's help text, so the
command line and the Python API (``run_search(SearchSettings(...))``) cannot drift apart.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rope_adapter.cli import CliError, IntListAction

EPILOG = """\
examples:
  # the embedded SmolLM2-135M-Instruct, generated 20-pair KV records, 100 trials, outputs in lrs-search/
  rope-adapter search --task kv-retrieval --pairs 20 --trials 100 --out lrs-search

  # the Lost in the Middle file as it is, factors between 0.9 and 1.5, a 5 % perplexity guard
  rope-adapter search --data kv-retrieval-75_keys.jsonl.gz --s-min 0.9 --s-max 1.5 --max-ppl-increase 0.05

  # a 7B model on a GPU box, 4 workers here; other machines join with the same --storage/--study
  rope-adapter search --model org/model-7b --device cuda --dtype bfloat16 --workers 4 \\
      --storage postgresql+psycopg2://user:pw@db-host/lrs --study llama7b-kv --trials 400

Resuming: run the same command again. Finished trials stay in the study (study.db in --out by default),
numbering continues and --trials counts the study's finished trials, so only the rest is run; --trials 0
rebuilds the outputs from the study. A study that exists with other settings is refused.

Outputs in --out: adapter/ (load with PeftModel.from_pretrained after `import rope_adapter`),
search_report.json (every trial, the Pareto front, baselines, held-out comparison), search_report.md,
pareto.png, factors.png, positions.png.
"""


def _help(name: str) -> str:
    from rope_adapter.search.study import settings_help

    return settings_help(name).replace("%", "%%")


def _default(name: str) -> Any:
    from rope_adapter.search.study import settings_default

    value = settings_default(name)
    return list(value) if isinstance(value, tuple) else value


def _k_value(text: str) -> int | None:
    """``--k``: a positive number of answer tokens, or ``all`` for the whole answer."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens >= 1 or 'all', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of tokens >= 1 or 'all', got {text!r}")
    return value


def _key_value(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="search per-layer RoPE factors (Bezier curve + NSGA-II, Optuna) and save the best as an adapter",
        description="Search per-layer RoPE scaling factors on a fitness task: the factors follow a Bezier curve "
        "over layer depth; Optuna's NSGA-II maximises the mean and the worst gold-position score under constraints "
        "(factor bounds, optional perplexity guard). The unscaled model and uniform factors are the first trials. "
        "Writes the chosen adapter, a JSON/Markdown report with a held-out comparison, and plots.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("model")
    g.add_argument("--model", default=_default("model"), help=_help("model"))
    g.add_argument("--tokenizer", default=_default("tokenizer"), help=_help("tokenizer"))
    g.add_argument("--device", default=_default("device"), help=_help("device"))
    g.add_argument(
        "--dtype", default=_default("dtype"), choices=["auto", "float32", "bfloat16", "float16"], help=_help("dtype")
    )
    g.add_argument("--device-map", default=_default("device_map"), help=_help("device_map"))
    g.add_argument("--batch-size", type=int, default=_default("batch_size"), help=_help("batch_size"))
    g.add_argument("--max-batch-tokens", type=int, default=_default("max_batch_tokens"), help=_help("max_batch_tokens"))
    g.add_argument("--threads", type=int, default=_default("threads"), help=_help("threads"))

    g = p.add_argument_group("task")
    g.add_argument("--task", default=_default("task"), help=_help("task"))
    g.add_argument("--data", default=_default("data"), help=_help("data"))
    g.add_argument("--pairs", "--num-pairs", dest="pairs", type=int, default=_default("pairs"), help=_help("pairs"))
    g.add_argument(
        "--positions",
        nargs="+",
        action=IntListAction,
        default=_default("positions"),
        metavar="P",
        help=_help("positions") + " Written 0 5 10 or 0,5,10.",
    )
    g.add_argument("--num-positions", type=int, default=_default("num_positions"), help=_help("num_positions"))
    g.add_argument(
        "--task-option",
        "--task-arg",
        dest="task_option",
        type=_key_value,
        action="append",
        default=[],  # collected pairs; SearchSettings.task_options is built from them
        metavar="KEY=VALUE",
        help=_help("task_options") + " Repeatable; VALUE is read as JSON when it parses.",
    )
    g.add_argument("--search-records", type=int, default=_default("search_records"), help=_help("search_records"))
    g.add_argument("--holdout-records", type=int, default=_default("holdout_records"), help=_help("holdout_records"))
    g.add_argument("--data-seed", type=int, default=_default("data_seed"), help=_help("data_seed"))
    g.add_argument("--chat-template", action="store_true", help=_help("chat_template"))

    g = p.add_argument_group("objective")
    g.add_argument("--score", default=_default("score"), choices=["answer", "logprob", "accuracy"], help=_help("score"))
    g.add_argument(
        "--k", type=_k_value, default=_default("k"), help=_help("k") + " 'all': every answer token (the whole answer)."
    )
    g.add_argument(
        "--objective", default=_default("objective"), choices=["pareto", "weighted"], help=_help("objective")
    )
    g.add_argument(
        "--position-weights",
        type=float,
        nargs="+",
        default=_default("position_weights"),
        metavar="W",
        help=_help("position_weights"),
    )
    g.add_argument("--worst-weight", type=float, default=_default("worst_weight"), help=_help("worst_weight"))
    g.add_argument("--select", default=_default("select"), choices=["mean", "worst", "balanced"], help=_help("select"))

    g = p.add_argument_group("search space and constraints")
    g.add_argument("--degree", type=int, default=_default("degree"), help=_help("degree"))
    g.add_argument("--x-mode", default=_default("x_mode"), choices=["fixed", "free"], help=_help("x_mode"))
    g.add_argument("--s-min", type=float, default=_default("s_min"), help=_help("s_min"))
    g.add_argument("--s-max", type=float, default=_default("s_max"), help=_help("s_max"))
    g.add_argument("--margin", type=float, default=_default("margin"), help=_help("margin"))
    g.add_argument(
        "--layer-bounds",
        nargs="+",
        default=_default("layer_bounds"),
        metavar="FIRST-LAST:LOW:HIGH",
        help=_help("layer_bounds"),
    )
    g.add_argument("--max-step", type=float, default=_default("max_step"), help=_help("max_step"))
    g.add_argument("--uniform", type=float, nargs="*", default=_default("uniform"), metavar="S", help=_help("uniform"))
    g.add_argument("--ppl-text", default=_default("ppl_text"), help=_help("ppl_text"))
    g.add_argument(
        "--max-ppl-increase", type=float, default=_default("max_ppl_increase"), help=_help("max_ppl_increase")
    )
    g.add_argument("--ppl-window-chars", type=int, default=_default("ppl_window_chars"), help=_help("ppl_window_chars"))
    g.add_argument("--ppl-windows", type=int, default=_default("ppl_windows"), help=_help("ppl_windows"))

    g = p.add_argument_group("study")
    g.add_argument("--trials", type=int, default=_default("trials"), help=_help("trials"))
    g.add_argument("--timeout", type=float, default=_default("timeout"), metavar="S", help=_help("timeout"))
    g.add_argument("--budget", type=float, default=_default("budget"), metavar="S", help=_help("budget"))
    g.add_argument("--storage", default=_default("storage"), metavar="URL", help=_help("storage"))
    g.add_argument("--study", default=_default("study"), metavar="NAME", help=_help("study"))
    g.add_argument("--workers", type=int, default=_default("workers"), help=_help("workers"))
    g.add_argument("--population", type=int, default=_default("population"), help=_help("population"))
    g.add_argument(
        "--race",
        type=float,
        nargs="*",
        default=_default("race"),
        metavar="SHARE",
        help=_help("race") + " Written --race 0.2 0.5; --race alone turns racing off.",
    )
    g.add_argument("--race-z", type=float, default=_default("race_z"), help=_help("race_z"))
    g.add_argument("--max-records", type=int, default=_default("max_records"), metavar="N", help=_help("max_records"))
    g.add_argument("--seed", type=int, default=_default("seed"), help=_help("seed"))
    g.add_argument("--heartbeat", type=int, default=_default("heartbeat"), metavar="S", help=_help("heartbeat"))
    g.add_argument("--holdout-accuracy", action="store_true", help=_help("holdout_accuracy"))
    g.add_argument("--out", type=Path, default=Path(_default("out")), help=_help("out"))
    g.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")
    g.add_argument("--json", action="store_true", help="Print the result summary as JSON instead of text.")
    p.set_defaults(run=run)


def settings_from_args(args: argparse.Namespace) -> Any:
    """The :class:`SearchSettings` of parsed arguments (each flag's dest is its field's name, but for
    ``--task-option`` and ``--no-progress``; lists become the tuples the dataclass holds)."""
    from dataclasses import fields

    from rope_adapter.search import SearchSettings

    values = {f.name: getattr(args, f.name) for f in fields(SearchSettings) if hasattr(args, f.name)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    values.update(task_options=dict(args.task_option), out=str(args.out), progress=not args.no_progress)
    return SearchSettings(**values)


def run(args: argparse.Namespace) -> int:
    from rope_adapter.search import SearchError, run_search

    try:
        result = run_search(settings_from_args(args))
    except SearchError as exc:
        raise CliError(str(exc)) from None
    report = result.report
    holdout = report.get("holdout") or {}
    summary = {
        "out": str(result.out_dir),
        "adapter": None if result.adapter_dir is None else str(result.adapter_dir),
        "report": str(result.report_path),
        "study": result.study_name,
        "storage": result.storage,
        "finished_trials": report["study"]["complete"],
        "chosen_trial": result.chosen_trial,
        "verdict": holdout.get("verdict"),
        "warning": (report.get("chosen") or {}).get("warning"),
    }
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    study = report["study"]
    print(
        f"study {study['name']!r} in {study['storage']}: {study['complete']} finished trials "
        f"({study['evaluated']} scored, {study['infeasible']} infeasible)"
    )
    if result.chosen_trial is None:
        print("no trial was scored yet: nothing to choose (run more trials)")
    else:
        print(f"chosen: trial {result.chosen_trial} -> {result.adapter_dir}")
        warning = (report.get("chosen") or {}).get("warning")
        if warning:
            print(f"warning: {warning}")
        if holdout.get("verdict"):
            print(holdout["verdict"])
    print(f"report: {result.report_path} (summary: {result.out_dir / 'search_report.md'})")
    return 0
