"""`rope-adapter eval`: compare model variants by gold position (the U-curve) or by context length.

    rope-adapter eval --task kv_retrieval --pairs 20 --num-samples 20 \\
        --variants base,uniform:1.05,adapter:out/adapter --out eval-kv
    rope-adapter eval --task perplexity --data book.txt --lengths 2k,4k,8k,16k \\
        --variants base,linear:2,dynamic:2,linear:2+adapter:out/adapter,dynamic:2+adapter:out/adapter

Every flag is a setting of :class:`rope_adapter.evaluate.EvalSettings` (by its flat name: the model and task parts
are search's too) and shows its help text (built by :mod:`rope_adapter.cli.settings_flags`, as ``search``'s are), so
a new setting is one field and the command line and the Python API (``run_eval(EvalSettings(...))``) cannot drift
apart. :func:`rope_adapter.evaluate.run_eval`
does the work (every input checked before the model's weights are loaded).
"""

from __future__ import annotations

import argparse
import sys

from rope_adapter.cli import parse_command
from rope_adapter.cli.settings_flags import (
    FlagOptions,
    add_flags,
    add_settings_flags,
    command_defaults,
    settings_fields,
    settings_values,
)
from rope_adapter.evaluate.results import ResultsFile
from rope_adapter.evaluate.run import EvalSettings, SampleSettings, run_eval
from rope_adapter.scoring.loading import bfloat16_hint
from rope_adapter.scoring.settings_parts import TASK_GROUP

MODEL_FLAGS = ("model", "dtype", "device")
OVERRIDES: dict[str, FlagOptions] = {"data_seed": {"flags": ("--data-seed", "--seed")}}
"""``--seed`` is eval's older name of ``--data-seed`` (search's ``--seed`` seeds its sampler)."""


EPILOG = """\
examples:
  # base, two flat factors and a searched adapter on 40 fresh 50-pair records, 10 gold positions each
  rope-adapter eval --model qwen2.5-coder-0.5b-instruct --pairs 50 --num-samples 40 --data-seed 7 \\
      --num-positions 10 --variants base,uniform:1.05,uniform:1.1,found=adapter:runs/qwen/adapter --out runs/eval-7

  # the Lost in the Middle file as it is, with real greedy decoding as well as the teacher-forced verdict
  rope-adapter eval --data kv-retrieval-75_keys.jsonl.gz --adapter runs/qwen/adapter --scores accuracy,tf_accuracy

  # perplexity by context length: the base, a flat factor and the adapter
  rope-adapter eval --task perplexity --data book.txt --lengths 2k,4k,8k \\
      --variants base,uniform:1.1,adapter:runs/qwen/adapter

An interrupted run keeps its finished records in --out/eval_progress.json: the same command resumes after them.
Pool runs on other records with `rope-adapter compare`.
"""


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """--model, --dtype, --device (shared with `analyze`): the model part's."""
    cli = settings_fields(SampleSettings)
    add_flags(p, [cli[name] for name in MODEL_FLAGS], command_defaults(SampleSettings), OVERRIDES)


def add_task_arguments(p: argparse.ArgumentParser, default_samples: int) -> None:
    """Task and sample options (shared with `analyze`): the task part's and SampleSettings' own "task and samples"
    settings."""
    group = [e for e in settings_fields(SampleSettings).values() if e.field.metadata.get("group") == TASK_GROUP]
    defaults = command_defaults(SampleSettings) | {"num_samples": default_samples}
    add_flags(p.add_argument_group(TASK_GROUP), group, defaults, OVERRIDES)


HELP = "compare variants by gold position (U-curve) or by context length (extrapolation)"
DESCRIPTION = (
    "Score several model variants on the same samples: greedy accuracy and gold log-probability by gold position "
    "(kv_retrieval, passkey, mdqa), or perplexity by context length (--task perplexity --lengths 2k,4k,...). Writes "
    "results.json, results.md and positions.png (or lengths.png) with 95% confidence intervals."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_flags(p, EvalSettings, overrides=OVERRIDES)


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    """The parsed flags as :class:`EvalSettings` (checked when made): each setting from its flag."""
    return EvalSettings.flat(**settings_values(EvalSettings, args, OVERRIDES))


def settings_from_argv(argv: list[str]) -> EvalSettings:
    """The :class:`EvalSettings` of ``rope-adapter eval`` flags (for scripts that take an eval's command line)."""
    return settings_from_args(parse_command("eval", argv))


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    result = run_eval(settings)
    if (hint := bfloat16_hint(settings.model.dtype, settings.model.device)) is not None:
        print(hint, file=sys.stderr)  # after the run: an error stays one line
    print_summary(result.to_dict())
    print("wrote " + ", ".join(str(p) for p in result.paths.values()))
    return 0


def print_summary(data: ResultsFile) -> None:
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
