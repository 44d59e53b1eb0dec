"""`rope-adapter search`: find per-layer RoPE factors with a constrained Bezier search (Optuna; --sampler).

Every flag maps to a setting of ``rope_adapter.search.SearchSettings`` (by its flat name) and shows its help text, so the
command line and the Python API (``run_search(SearchSettings(...))``) cannot drift apart.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from collections.abc import Iterator

from rope_adapter.cli import CliInterrupted, IntListAction, output_path, parse_command
from rope_adapter.cli.settings_flags import FlagOptions, add_settings_flags, settings_values
from rope_adapter.files import dumps_json
from rope_adapter.scoring.loading import bfloat16_hint
from rope_adapter.search import SearchSettings, run_search
from rope_adapter.search.interrupts import interrupts_outside_storage

EPILOG = """\
examples:
  # the embedded SmolLM2-135M-Instruct, generated 20-pair KV records, 100 trials, outputs in lrs-search/
  rope-adapter search --task kv_retrieval --pairs 20 --trials 100 --out lrs-search

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


GROUPS: dict[str, tuple[str, ...]] = {
    "model": ("model", "tokenizer", "device", "dtype", "device_map", "batch_size", "max_batch_tokens", "threads"),
    "task": ("task", "data", "pairs", "positions", "num_positions", "num_filler", "num_documents", "task_options")
    + ("search_records", "holdout_records", "confirm_top", "confirm_records", "data_seed", "chat_template"),
    "objective": ("score", "k", "objective", "position_weights", "worst_weight", "select"),
    "search space and constraints": ("degree", "x_mode", "s_min", "s_max", "margin", "endpoint_margin")
    + ("layer_bounds", "max_step", "uniform", "ppl_text", "max_ppl_increase", "ppl_window_chars", "ppl_windows"),
    "study": ("trials", "timeout", "budget", "storage", "study", "workers", "sampler", "population", "race")
    + ("race_z", "max_records", "seed", "heartbeat", "holdout_accuracy", "out"),
}
"""Where each setting's flag is listed in --help, by flat name; every setting with a CLI flag is in one group
(:func:`rope_adapter.cli.settings_flags.add_settings_flags` builds the flags and checks that)."""

OVERRIDES: dict[str, FlagOptions] = {
    "pairs": {
        "nargs": "+",
        "action": IntListAction,
        "type": None,
        "suffix": " Several (--pairs 25 50 75): one study over those record lengths; every trial is scored at each, "
        "its objectives are the mean and the worst over every (length, gold position), and the report shows each "
        "length. Written --pairs 25 50 75 or 25,50,75.",
    },
    "chat_template": {"choices": ["on", "off"]},
    "data": {  # several are taken only to be refused in one line (SearchSettings names the alternatives)
        "nargs": "+",
        "action": "extend",
        "metavar": "FILE",
        "suffix": " One file, of one record length (several lengths: --pairs 75 140 without --data).",
    },
    "positions": {"suffix": " Written 0 5 10 or 0,5,10."},
    "k": {"type": _k_value, "suffix": " 'all': every answer token (the whole answer)."},
    "uniform": {"nargs": "*", "metavar": "S"},
    "race": {"nargs": "*", "metavar": "SHARE", "suffix": " Written --race 0.2 0.5; --race alone turns racing off."},
    "position_weights": {"metavar": "W"},
    "out": {"type": output_path},
}
"""What search's flags take besides their settings' own metadata: several record lengths, 'all', empty lists."""


HELP = "search per-layer RoPE factors (Bezier curve + an Optuna sampler) and save the best as an adapter"
DESCRIPTION = (
    "Search per-layer RoPE scaling factors on a fitness task: the factors follow a Bezier curve over layer depth; an "
    "Optuna sampler (--sampler: GP by default, NSGA-II or TPE) maximises the mean and the worst gold-position score "
    "under constraints (factor bounds, optional perplexity guard). The unscaled model and uniform factors are the "
    "first trials. Writes the chosen adapter, a JSON/Markdown report with a held-out comparison, and plots."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_flags(p, SearchSettings, GROUPS, OVERRIDES, exclude={"progress"})
    p.add_argument("--no-progress", action="store_true", help="Hide the progress bar (SearchSettings.progress).")
    p.add_argument("--json", action="store_true", help="Print the result summary as JSON instead of text.")


def settings_from_args(args: argparse.Namespace) -> SearchSettings:
    """The :class:`SearchSettings` of parsed arguments (each flag's dest is its setting's flat name, but for
    ``--no-progress``)."""
    values = settings_values(SearchSettings, args, OVERRIDES, exclude={"progress"})
    return SearchSettings.flat(**values | {"out": str(values["out"]), "progress": not args.no_progress})


def settings_from_argv(argv: list[str]) -> SearchSettings:
    """The :class:`SearchSettings` of ``rope-adapter search`` flags (for scripts that take a search's command line)."""
    return settings_from_args(parse_command("search", argv))


class _InterruptLogFilter(logging.Filter):
    """Drops Optuna's report of a trial stopped by Ctrl-C or SIGTERM (a traceback of 60 lines, then "failed with
    value None"): the CLI says "interrupted" in one line, and the trial is recorded as FAIL (it is rerun on resume)."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, KeyboardInterrupt) or "KeyboardInterrupt" in record.getMessage():
            self.interrupted = True
            return False
        return not (self.interrupted and "failed with value None" in record.getMessage())


@contextlib.contextmanager
def _interrupts_in_one_line() -> Iterator[None]:
    """SIGTERM (``timeout``, job schedulers) is handled like Ctrl-C, and neither prints Optuna's traceback."""
    log_filter = _InterruptLogFilter()
    logger = logging.getLogger("optuna.study._optimize")  # where Optuna reports a failed trial
    logger.addFilter(log_filter)
    try:
        with interrupts_outside_storage((signal.SIGTERM,)):  # never half-way through a storage write
            yield
    except KeyboardInterrupt:
        raise CliInterrupted(
            "interrupted: the study keeps its finished trials and scores (the one running is recorded as failed; "
            "a baseline is run again); run the same command to resume"
        ) from None
    finally:
        logger.removeFilter(log_filter)


SEARCH_LOGGER = SearchSettings.__module__.rsplit(".", 1)[0]
"""The search package's logger (``rope_adapter.search``): progress lines without a bar, warnings."""


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    logging.basicConfig(format="%(message)s")  # root stays at WARNING; the lines of --no-progress at INFO
    logging.getLogger(SEARCH_LOGGER).setLevel(logging.INFO)
    with _interrupts_in_one_line():
        result = run_search(settings)
    if (hint := bfloat16_hint(settings.model.dtype, settings.model.device)) is not None:
        print(hint, file=sys.stderr)  # after the run: an error stays one line
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
        print(dumps_json(summary, where="search --json", indent=1))
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
