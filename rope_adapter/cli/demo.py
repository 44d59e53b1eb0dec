"""`rope-adapter demo`: the main job end to end on the embedded default model, SmolLM2-135M-Instruct.

1. evaluate the base model on KV retrieval by gold position (the lost-in-the-middle curve);
2. search per-layer factors (Bezier curve, an Optuna sampler: GP by default) with a small budget;
3. evaluate the found adapter on fresh held-out records against the base and the best uniform factor, and beside
   it the adapter of a full search made before (for SmolLM2 the one shipped with rope-adapter: 228 trials, about
   two hours), so that the report shows both what a few minutes of search find and what the method can do;
4. export the scaled model (a folder that loads without PEFT) and write its model card;
5. write ``report.md``: what was done, the numbers, the plots, and every command to reproduce a step alone.

Each step is a `rope-adapter` command, printed before it runs, so any step can be rerun alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import time
from pathlib import Path

from transformers import AutoConfig

from rope_adapter import LrsConfig, LrsError, files
from rope_adapter.cli import CliError, build_parser, output_path
from rope_adapter.cli.search import settings_from_args
from rope_adapter.config import load_lrs_config
from rope_adapter.embedded.loading import resolve_model_path
from rope_adapter.embedded.registry import SMOLLM2, find_embedded
from rope_adapter.export import check_adapter_fits
from rope_adapter.export.card import build_card
from rope_adapter.numbers import cli_float, cli_int
from rope_adapter.records import read_json
from rope_adapter.scoring.results_table import RESULTS_TABLE_NAME, ResultsTable
from rope_adapter.search.report_types import SearchReport
from rope_adapter.search.samplers import SAMPLERS
from rope_adapter.search.settings import DEFAULT_UNIFORM, SearchError
from rope_adapter.search.study import check_search, check_stored_study

STEP_FOLDERS = ("1-base-eval", "2-search", "3-heldout-eval", "4-exported")

# The adapter of the full SmolLM2 search (benchmarks/results/search_smollm2_10pairs: NSGA-II, 228 trials, about
# two hours on 2 CPU cores, KV retrieval at 10 pairs), shipped so that the demo can show it beside its own.
SMOLLM2_REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "smollm2-135m-instruct-kv10"
REFERENCE_LABEL, QUICK_LABEL = "full-search", "demo-search"


HELP = "end-to-end demo on the embedded SmolLM2-135M-Instruct: eval, search, held-out eval, export, report"
DESCRIPTION = (
    "Run the whole method on SmolLM2-135M-Instruct (fetched from PyPI once): evaluate the base "
    "model by gold position on KV retrieval, search layer factors with a small budget, evaluate the found "
    "adapter on held-out records against the base and the best uniform factor, export the scaled model with "
    "its model card, and write OUT/report.md."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=output_path, default=Path("demo-report"), help="report folder (default: demo-report)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="base model (default: the embedded SmolLM2)")
    p.add_argument("--pairs", type=cli_int, default=10, help="key-value pairs per record (default: 10)")
    p.add_argument(
        "--positions",
        type=cli_int,
        nargs="+",
        default=None,
        help="gold positions (default: search's and eval's, every position of a record of up to 25 pairs: at 10 "
        "pairs all 10 cost 2.2x the CPU of 3 and gave 0.75-0.97x the standard error per CPU-hour, "
        "benchmarks/results/positions_per_record_smollm2_10pairs)",
    )
    p.add_argument("--trials", type=cli_int, default=24, help="search trials (default: 24)")
    p.add_argument(
        "--sampler",
        choices=list(SAMPLERS),
        default=None,
        help="the search's Optuna sampler (default: search's own, gp for a new study; see rope-adapter search --help)",
    )
    p.add_argument(
        "--population",
        type=cli_int,
        default=8,
        help="NSGA-II population per generation, with --sampler nsga2 (default: 8)",
    )
    p.add_argument(
        "--s-min",
        type=cli_float,
        default=0.9,
        help="smallest factor (default 0.9: a small budget needs a narrow range; prompts here are far inside "
        "SmolLM2's 8k trained context, where large factors only hurt)",
    )
    p.add_argument("--s-max", type=cli_float, default=1.2, help="largest factor (default: 1.2)")
    p.add_argument("--search-records", type=cli_int, default=4, help="records scored by every trial (default: 4)")
    p.add_argument("--eval-records", type=cli_int, default=8, help="records per evaluation (default: 8)")
    p.add_argument(
        "--confirm-top",
        type=cli_int,
        default=2,
        help="searched curves and uniform factors re-scored on the confirmation records (default: 2)",
    )
    p.add_argument(
        "--confirm-records",
        type=cli_int,
        default=8,
        help="confirmation records (default: 8; with 2 curves and 2 factors about the cost of 8 of the demo's "
        "trials: search's own default, 3 and 3 on 60 records, is sized for searches of 40 records and would cost "
        "four times the demo's whole search)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace OUT/4-exported when it exists (refused otherwise)")
    p.add_argument(
        "--reference-adapter",
        default=None,
        metavar="PATH",
        help="an adapter from a full search, evaluated beside the demo's own in the held-out step (label "
        f"{REFERENCE_LABEL}); default: for SmolLM2 the adapter of its committed 228-trial search at 10 pairs, "
        "shipped with rope-adapter; 'none' to leave it out",
    )


OLDER_REPORT_FIELDS = ("study.racing", "holdout.search_score")
"""Fields of ``search_report.json`` that reports written before they were added lack (the demo reads neither)."""


def read_search_report(path: Path) -> SearchReport:
    """A search's ``search_report.json``, checked against its record (strict JSON, a non-finite score stored as
    null): one :class:`~rope_adapter.errors.RecordFileError` naming the file and the field otherwise. A report of an
    older version may lack :data:`OLDER_REPORT_FIELDS`."""
    return read_json(path, SearchReport, null_numbers=True, missing_ok=OLDER_REPORT_FIELDS)


def _step(number: int, title: str, argv: list[str], commands: list[str]) -> None:
    command = "rope-adapter " + shlex.join(argv)
    commands.append(command)
    print(f"\n[{number}/5] {title}\n$ {command}", flush=True)
    args = _parsed(argv)
    try:  # the step's error joins the demo's one line (main() would print it as a line of its own)
        code = int(args.run(args) or 0)
    except (LrsError, FileNotFoundError) as exc:
        raise CliError(f"step {number} ({title}) failed: {exc}; rerun it alone: {command}") from exc
    if code != 0:
        raise CliError(f"step {number} ({title}) failed with exit code {code}; rerun it alone: {command}")


def _parsed(argv: list[str]) -> argparse.Namespace:
    """A step's command line parsed as `rope-adapter` parses it; an argparse error becomes one CliError line."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            return build_parser().parse_args(argv)
    except SystemExit:
        last = printed.getvalue().strip().splitlines()[-1:] or ["cannot parse it"]
        raise CliError(f"the demo's {argv[0]} step: {last[0]}") from None


def _unwritable(out: Path) -> str | None:
    """Why ``out`` cannot become the report folder, without creating anything; None when it can."""
    place = out.expanduser().absolute()
    while not place.exists():
        place = place.parent
    if not place.is_dir():
        return f"--out {out}: {place} is a file; give a folder"
    if not os.access(place, os.W_OK | os.X_OK):
        return f"--out {out}: {place} is not writable; choose another --out"
    blocked = [place / step for step in STEP_FOLDERS if (place / step).exists() and not (place / step).is_dir()]
    if place == out.expanduser().absolute() and blocked:
        return f"--out {out}: {blocked[0]} is a file, where the demo writes a folder; choose another --out"
    return None


def check_steps(args: argparse.Namespace, search_argv: list[str]) -> None:
    """Refuse any setting a later step would refuse, before the first step runs: nothing is written and no model
    weights are loaded (the search's own checks read only the model's config, its tokenizer and the task's data;
    an existing study in ``OUT/2-search`` must have the same settings). :class:`CliError` with one line."""
    for flag, value in (("--eval-records", args.eval_records), ("--search-records", args.search_records)):
        if value < 1:
            raise CliError(f"{flag} must be >= 1 (records per evaluation or per search trial), got {value}")
    if (why := _unwritable(args.out)) is not None:
        raise CliError(why)
    exported = args.out / "4-exported"
    if not args.overwrite and exported.exists() and (not exported.is_dir() or any(exported.iterdir())):
        raise CliError(
            f"{exported} exists (an earlier demo's export, or files of yours): pass --overwrite to replace it, or "
            "choose another --out"
        )
    try:
        settings = settings_from_args(_parsed(search_argv))
        check_search(settings)
        check_stored_study(settings)
    except SearchError as exc:
        raise CliError(f"the demo's search step would refuse these settings: {exc}") from None
    # the held-out step compares with the best uniform factor: one must be in range and reached by --trials
    if not settings.uniform_values():
        raise CliError(
            f"--s-min {args.s_min:g} and --s-max {args.s_max:g} leave none of the uniform factors {DEFAULT_UNIFORM} "
            "that the held-out step compares with: widen the range"
        )
    needed = 2 if settings.space.s_min <= 1.0 <= settings.space.s_max else 1
    if settings.study.trials is None or settings.study.trials < needed:
        raise CliError(
            f"--trials must be >= {needed}: the first trials are the baselines (the unscaled model when 1 is in "
            f"range, then uniform factors), and the held-out step needs the best uniform one; got {settings.study.trials}"
        )
    _check_model_supported(settings.model.name)
    reference_adapter(args)


def reference_adapter(args: argparse.Namespace) -> Path | None:
    """The full search's adapter the held-out step evaluates beside the demo's own, checked against the model
    (no weights loaded); None when there is none for this model or ``--reference-adapter none``."""
    given = args.reference_adapter
    if given is not None and str(given).strip().casefold() == "none":
        return None
    if given is None:
        if find_embedded(str(args.model)) is not SMOLLM2:
            return None
        path = SMOLLM2_REFERENCE
    else:
        path = Path(given).expanduser()
    try:
        check_adapter_fits(load_lrs_config(path), AutoConfig.from_pretrained(resolve_model_path(args.model)))
    except (LrsError, OSError) as exc:
        raise CliError(f"--reference-adapter {path}: not an adapter for {args.model}: {exc}") from None
    return path


def reference_note(reference: Path | None) -> list[str]:
    """What the held-out step's adapters are, for the report."""
    quick = f"- `{QUICK_LABEL}`: the adapter this demo's small search found (step 2)."
    if reference is None:
        return [quick, "", "No full search's adapter was given for this model (`--reference-adapter PATH`).", ""]
    if reference == SMOLLM2_REFERENCE:
        what = (
            "the adapter of the full SmolLM2 search shipped with rope-adapter (NSGA-II, 228 trials, about two hours "
            "on 2 CPU cores, KV retrieval at 10 pairs; in the repository's benchmarks/results/search_smollm2_10pairs, "
            "where on 90 held-out records it beat the best uniform factor by about 8 points)"
        )
    else:
        what = f"the adapter given with `--reference-adapter` (`{reference}`)"
    return [quick, f"- `{REFERENCE_LABEL}`: {what}.", ""]


def _check_model_supported(model: str) -> None:
    """The search and the export need a model the adapter supports: checked on a meta-device skeleton."""
    try:
        check_adapter_fits(LrsConfig(), AutoConfig.from_pretrained(resolve_model_path(model)))
    except LrsError as exc:
        raise CliError(f"the demo's search and export steps need a model the adapter supports: {exc}") from None


def _read(path: Path) -> str:
    return path.read_text() if path.is_file() else f"_{path.name} is missing_\n"


def headline(table: ResultsTable) -> list[str]:
    """One line per metric and comparison: the difference over all positions, its 95 % interval and verdict."""
    lines = []
    for metric in table.metrics:
        for c in metric.comparisons:
            d = c.overall
            if d is None:
                continue
            interval = f" [{d.low:+.3f}, {d.high:+.3f}]" if d.low is not None and d.high is not None else ""
            lines.append(f"- {metric.name}: `{c.variant}` − `{c.against}` = {d.diff:+.3f}{interval}, {d.verdict}")
    return lines


def run(args: argparse.Namespace) -> int:
    start = time.time()
    out: Path = args.out
    positions = [] if args.positions is None else [str(p) for p in args.positions]
    search_positions = ["--positions", *positions] if positions else []  # none given: the task's default
    eval_positions = ["--positions", ",".join(positions)] if positions else []
    commands: list[str] = []
    base_eval, search_dir, heldout_eval, export_dir = (
        out / "1-base-eval",
        out / "2-search",
        out / "3-heldout-eval",
        out / "4-exported",
    )
    common_task = ["--model", args.model, "--task", "kv_retrieval", "--pairs", str(args.pairs)]
    search_argv = (
        ["search", *common_task]
        + [*search_positions, "--search-records", str(args.search_records)]
        + [
            "--holdout-records",
            str(args.eval_records),
            "--trials",
            str(args.trials),
            "--population",
            str(args.population),
        ]
        + ["--confirm-top", str(args.confirm_top), "--confirm-records", str(args.confirm_records)]
        + (["--sampler", args.sampler] if args.sampler else [])
        + ["--s-min", f"{args.s_min:g}", "--s-max", f"{args.s_max:g}"]
        + [
            "--storage",
            f"sqlite:///{(search_dir / 'study.db').resolve()}",
            "--study",
            "demo",
            "--out",
            str(search_dir),
        ]
    )
    check_steps(args, search_argv)  # every later step's settings, before the first step does any work
    reference = reference_adapter(args)
    out.mkdir(parents=True, exist_ok=True)
    _step(
        1,
        "the base model's score by gold position",
        ["eval", *common_task, *eval_positions, "--num-samples", str(args.eval_records)]
        + ["--variants", "base", "--seed", "1", "--out", str(base_eval)],
        commands,
    )
    _step(2, "search per-layer factors (Bezier curve over depth, an Optuna sampler)", search_argv, commands)
    report = read_search_report(search_dir / "search_report.json")
    adapter = search_dir / "adapter"
    best_uniform = report["baselines"]["best_uniform"]["uniform"]
    variants = f"base,uniform:{best_uniform:g},{QUICK_LABEL}=adapter:{adapter}"
    if reference is not None:
        variants += f",{REFERENCE_LABEL}=adapter:{reference}"
    _step(
        3,
        "held-out evaluation: base vs best uniform factor vs found adapter"
        + (" vs a full search's adapter" if reference is not None else "")
        + " (fresh records)",
        ["eval", *common_task, *eval_positions, "--num-samples", str(args.eval_records)]
        + ["--variants", variants, "--seed", "2", "--out", str(heldout_eval)],
        commands,
    )
    _step(
        4,
        "export the scaled model (loads without PEFT) and its model card",
        ["export", "--model", args.model, "--adapter", str(adapter), "--out", str(export_dir)]
        + (["--overwrite"] if args.overwrite else []),
        commands,
    )
    # the export carries the results its card shows: the search's held-out table and the held-out eval
    for source in (adapter / RESULTS_TABLE_NAME, heldout_eval / "results.json"):
        if source.is_file():
            files.copy_file(source, export_dir / source.name)
    card = build_card(export_dir)
    files.write_text(export_dir / "README.md", str(card))
    files.write_text(out / "model-card.md", str(card))
    heldout_table = ResultsTable.read(heldout_eval)

    print("\n[5/5] writing the report", flush=True)
    minutes = (time.time() - start) / 60
    shown_positions = ", ".join(str(p) for p in report["task"]["positions"])
    lines = [
        "# rope-adapter demo report",
        "",
        f"Model: `{args.model}`. Task: KV retrieval (Lost in the Middle format), {args.pairs} key-value pairs, gold "
        f"at positions {shown_positions}. Layer-specific RoPE scaling (arXiv 2503.04355): layer l rotates "
        f"queries and keys with inv_freq / s_l; the factors s_l follow a Bezier curve over depth found by "
        f"`{report['study']['sampler']}` (Optuna).",
        f"Total time: {minutes:.1f} minutes.",
        "",
        "## 1. The base model by gold position",
        "",
        "![base](1-base-eval/positions.png)",
        "",
        _read(base_eval / "results.md"),
        "## 2. The search",
        "",
        "![factors](2-search/factors.png) ![pareto](2-search/pareto.png)",
        "",
        _read(search_dir / "search_report.md"),
        "## 3. Held-out evaluation (fresh records, never seen by the search)",
        "",
        "![held-out](3-heldout-eval/positions.png)",
        "",
        *reference_note(reference),
        "Paired differences over all gold positions (from `3-heldout-eval/results_table.json`):",
        "",
        *headline(heldout_table),
        "",
        _read(heldout_eval / "results.md"),
        "## 4. Exported model and model card",
        "",
        f"- adapter: `{adapter}` (load with `import rope_adapter; PeftModel.from_pretrained(base, '{adapter}')`)",
        f"- exported model: `{export_dir}` (load with `AutoModelForCausalLM.from_pretrained('{export_dir}', "
        "trust_remote_code=True)`, or without trust_remote_code after `import rope_adapter`)",
        "- model card: [model-card.md](model-card.md), also the exported folder's README.md (with the held-out "
        "results: `rope-adapter card` shows what `rope-adapter push` would upload)",
        "",
        "## Reproduce",
        "",
        "Each step alone (the demo ran exactly these):",
        "",
        "```bash",
        *commands,
        "```",
        "",
        "Small budgets keep the demo short; the numbers above carry their standard errors and intervals, and",
        "differences inside them are not evidence of an effect. `benchmarks/search_smollm2.py` runs a larger search.",
        "",
    ]
    files.write_text(out / "report.md", "\n".join(lines))
    print(f"\ndone in {minutes:.1f} minutes. Report: {(out / 'report.md').resolve()}")
    return 0
