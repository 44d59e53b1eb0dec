"""`rope-adapter analyze`: RoPE's long-term decay for chosen factors, and where the last token's attention lands.

    rope-adapter analyze --adapter out/adapter --factors 1,1.25,2 --out analysis

writes ``decay.png``/``decay.json`` (RoFormer's relative upper bound by relative distance, one curve per
factor, analytic) and ``attention.png``/``attention.json`` (per layer, the share of the last token's attention
on the beginning, middle and end of kv-retrieval prompts, base vs the adapter, eager attention), and with
``--what sensitivity`` ``sensitivity.png``/``.json`` (per layer, d whole-answer log-prob / d log s_l at the base and
at the adapter's factors, with 95 % intervals over records), with ``analysis.md`` tying them together. ``--what decay`` needs no model weights. The flags are
:class:`rope_adapter.evaluate.analyze.AnalyzeSettings`' fields; :func:`run_analysis` does the work.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rope_adapter.cli import output_path
from rope_adapter.cli.eval import add_model_arguments, add_task_arguments
from rope_adapter.composed import flat_fields
from rope_adapter.evaluate.analyze import AnalyzeSettings, run_analysis
from rope_adapter.numbers import cli_float, cli_int

EPILOG = """\
examples:
  # RoPE's decay bound at factors 1 (base), 1.1 and 2, from the model's config alone
  rope-adapter analyze --model qwen2.5-coder-0.5b-instruct --what decay --factors 1.1,2 --out runs/decay
  # where the last token's attention lands, base against a searched adapter, on 50-pair records
  rope-adapter analyze --model qwen2.5-coder-0.5b-instruct --adapter runs/qwen/adapter --what attention \\
      --pairs 50 --out runs/attention
"""


def _float_list(text: str) -> list[float]:
    try:
        values = [cli_float(x) for x in text.split(",") if x.strip()]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"factors must be > 0, got {text!r}")
    return values


HELP = "RoPE decay bound for chosen factors; per-layer attention to beginning/middle/end"
DESCRIPTION = (
    "(1) RoFormer's relative upper bound of RoPE attention (its section 3.4.3) by relative "
    "distance for chosen factors, analytic; (2) per decoder layer, the share of the last token's attention "
    "that lands on the beginning, middle and end of the context, with and without an LRS adapter (eager "
    "attention, for this analysis only); (3) with --what sensitivity, per layer the slope of the gold answer's "
    "log-prob in that layer's log factor (autograd). Writes decay.png, attention.png, sensitivity.png, their "
    "JSON and analysis.md."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("--adapter", help="LRS adapter (folder or Hub id) to compare with the base model")
    p.add_argument(
        "--variant",
        help="instead of --adapter, any variant spec of `eval` (uniform:1.25, linear:2+adapter:PATH, ...)",
    )
    p.add_argument("--out", type=output_path, default=Path("analysis"), help="output folder")
    p.add_argument(
        "--what",
        default="decay,attention",
        help="comma-separated parts: decay, attention, sensitivity (d score / d log s_l per layer by autograd: "
        "one forward and backward pass per sample, so not in the default)",
    )
    g = p.add_argument_group("decay bound")
    g.add_argument("--factors", type=_float_list, default=[1.25, 2.0], help="factors to draw besides 1 (base)")
    g.add_argument("--max-distance", type=cli_int, help="largest relative distance (default: the model's positions)")
    g.add_argument("--head-dim", type=cli_int, help="rotated channels per head (default: from the model config)")
    g.add_argument("--theta", type=cli_float, help="RoPE base (default: from the model config)")
    add_task_arguments(p, default_samples=4)
    g = p.add_argument_group("attention shares")
    g.add_argument("--skip-first", type=cli_int, default=1, help="leave out the first N tokens (the attention sink)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def settings_from_args(args: argparse.Namespace) -> AnalyzeSettings:
    """The parsed flags as :class:`AnalyzeSettings` (checked when made): each setting that has a flag here, by its
    flat name."""
    values = {name: getattr(args, name) for name in flat_fields(AnalyzeSettings) if hasattr(args, name)}
    values["task_options"] = dict(values["task_options"])
    return AnalyzeSettings.flat(**values | {"progress": not args.no_progress})


def run(args: argparse.Namespace) -> int:
    paths = run_analysis(settings_from_args(args))
    print(f"wrote {paths['markdown']}")
    return 0
