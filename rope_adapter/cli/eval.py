"""`rope-adapter eval`: compare model variants by gold position (the U-curve) or by context length.

    rope-adapter eval --task kv_retrieval --num-pairs 20 --num-samples 20 \\
        --variants base,uniform:1.05,adapter:out/adapter --out eval-kv
    rope-adapter eval --task perplexity --data book.txt --lengths 2k,4k,8k,16k \\
        --variants base,linear:2,dynamic:2,linear:2+adapter:out/adapter,dynamic:2+adapter:out/adapter

Every flag is a field of :class:`rope_adapter.evaluate.EvalSettings` and shows that field's help text (built by
:mod:`rope_adapter.cli.settings_flags`, as ``search``'s are), so a new setting is one field there and the command
line and the Python API (``run_eval(EvalSettings(...))``) cannot drift apart. :func:`rope_adapter.evaluate.run_eval`
does the work (every input checked before the model's weights are loaded).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Any

from rope_adapter.cli.settings_flags import add_flags, add_settings_flags, settings_fields, settings_values
from rope_adapter.evaluate.run import TASK_GROUP, EvalSettings, SampleSettings, run_eval
from rope_adapter.scoring.loading import bfloat16_hint

MODEL_FIELDS = ("model", "dtype", "device")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """--model, --dtype, --device (shared with `analyze`): SampleSettings' fields."""
    cli = settings_fields(SampleSettings)
    add_flags(p, [cli[name] for name in MODEL_FIELDS])


def add_task_arguments(p: argparse.ArgumentParser, default_samples: int) -> None:
    """Task and sample options (shared with `analyze`): SampleSettings' fields of the "task and samples" group."""
    group = [f for f in fields(SampleSettings) if f.metadata.get("group") == TASK_GROUP]
    add_flags(p.add_argument_group(TASK_GROUP), group, {"num_samples": {"default": default_samples}})


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="compare variants by gold position (U-curve) or by context length (extrapolation)",
        description="Score several model variants on the same samples: greedy accuracy and gold log-probability "
        "by gold position (kv_retrieval, passkey, mdqa), or perplexity by context length (--task perplexity "
        "--lengths 2k,4k,...). Writes results.json, results.md and positions.png (or lengths.png) with 95% "
        "confidence intervals.",
    )
    add_settings_flags(p, EvalSettings)
    p.set_defaults(run=run)


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    """The parsed flags as :class:`EvalSettings` (checked when made): each field from its flag."""
    return EvalSettings(**settings_values(EvalSettings, args))


def settings_from_argv(argv: list[str]) -> EvalSettings:
    """The :class:`EvalSettings` of ``rope-adapter eval`` flags (for scripts that take an eval's command line)."""
    parser = argparse.ArgumentParser(prog="rope-adapter")
    add_parser(parser.add_subparsers())
    return settings_from_args(parser.parse_args(["eval", *argv]))


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    result = run_eval(settings)
    if (hint := bfloat16_hint(settings.dtype, settings.device)) is not None:
        print(hint, file=sys.stderr)  # after the run: an error stays one line
    print_summary(result.to_dict())
    print("wrote " + ", ".join(str(p) for p in result.paths.values()))
    return 0


def print_summary(data: dict[str, Any]) -> None:
    """A few lines on the terminal: overall scores and verdicts against the reference."""
    if data["kind"] == "lengths":
        for name, entry in data["summary"].items():
            cells = ", ".join(f"{n}: {v['perplexity']:.2f}" for n, v in entry["by_length"].items())
            print(f"  {name:<28} perplexity {cells}")
        return
    for name, entry in data["summary"].items():
        cells = []
        for metric, values in entry.items():
            overall = values["overall"]
            verdict = data["comparisons"].get(name, {}).get(metric, {}).get("overall", {}).get("verdict")
            cells.append(f"{metric} {overall['mean']:.3f}" + (f" ({verdict})" if verdict else ""))
        print(f"  {name:<28} " + "; ".join(cells))
