"""`rope-adapter compare RESULTS.json... --compare VARIANT REFERENCE`: paired differences between variants of several
`eval` runs, pooled over their records (:mod:`rope_adapter.evaluate.pooling`). Prints; writes nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rope_adapter.cli import CliError
from rope_adapter.evaluate.pooling import compare, load_runs, markdown
from rope_adapter.files import dumps_json, null_non_finite

HELP = "paired differences between variants of several `eval` runs, pooled over their records"
DESCRIPTION = """\
Pool the samples of one or more `rope-adapter eval` runs (their results.json, or the folders holding them) and
compare variants paired by record: each record's mean difference over its gold positions, a 95 % t interval and a
percentile bootstrap interval over records, and the difference at each gold position. Runs of the same task, seed and
record count score the same samples (a variant scored later joins the earlier ones); runs on other seeds add records,
each counted once. Runs of another model, dtype, task or prompt layout are refused, as is a sample scored twice with
different values. Prints a Markdown table (or JSON with --json) and writes no file."""
EPILOG = """\
example:
  rope-adapter compare runs/eval-seed7 runs/eval-seed7-found runs/eval-seed8 \\
      --compare found base --compare found uniform:1.1 --metrics tf_accuracy,logprob
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", type=Path, metavar="RESULTS", help="results.json of an eval run, or its folder")
    p.add_argument(
        "--compare",
        nargs=2,
        action="append",
        required=True,
        metavar=("VARIANT", "REFERENCE"),
        help="one comparison VARIANT - REFERENCE, by the variants' names in the runs (repeatable)",
    )
    p.add_argument(
        "--metrics",
        default="tf_accuracy,logprob",
        help="comma-separated sample metrics (default tf_accuracy,logprob; a greedy run also has accuracy)",
    )
    p.add_argument("--json", action="store_true", help="print the comparisons as JSON instead of Markdown")


def run(args: argparse.Namespace) -> int:
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if not metrics:
        raise CliError(f"--metrics {args.metrics!r} names no metric: give e.g. tf_accuracy,logprob")
    pooled = load_runs(args.runs)  # every run is read and checked before any comparison
    rows = [compare(pooled, v, r, m) for m in metrics for v, r in args.compare]
    if args.json:  # an interval over one record is undefined: null, as in the search's report
        sys.stdout.write(dumps_json(null_non_finite(rows), where="the comparisons", indent=1) + "\n")
    else:
        sys.stdout.write(markdown(rows, args.runs))
    return 0
