"""`rope-adapter analyze`: RoPE's long-term decay for chosen factors, and where the last token's attention lands.

    rope-adapter analyze --adapter out/adapter --factors 1,1.25,2 --out analysis

writes ``decay.png``/``decay.json`` (RoFormer's relative upper bound by relative distance, one curve per
factor, analytic) and ``attention.png``/``attention.json`` (per layer, the share of the last token's attention
on the beginning, middle and end of kv-retrieval prompts, base vs the adapter, eager attention), with
``analysis.md`` tying them together. ``--what decay`` needs no model weights.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rope_adapter.cli import CliError
from rope_adapter.cli.eval import add_model_arguments, add_task_arguments, task_kwargs
from rope_adapter.evaluate import evaluation as ev
from rope_adapter.evaluate.analysis import REGIONS, decay_curves, last_token_attention_shares
from rope_adapter.evaluate.plots import plot_attention_shares, plot_decay
from rope_adapter.evaluate.run import (
    chat_template_flag,
    check_out_folder,
    checked_device,
    checked_model_config,
    checked_task_kwargs,
)
from rope_adapter.scoring.loading import EvalError
from rope_adapter.scoring.variants import Variant, VariantError, build_variant, check_variants, parse_variant

PARTS = ("decay", "attention")


def _float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"factors must be > 0, got {text!r}")
    return values


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="RoPE decay bound for chosen factors; per-layer attention to beginning/middle/end",
        description="(1) RoFormer's relative upper bound of RoPE attention (its section 3.4.3) by relative "
        "distance for chosen factors, analytic; (2) per decoder layer, the share of the last token's attention "
        "that lands on the beginning, middle and end of the context, with and without an LRS adapter (eager "
        "attention, for this analysis only). Writes decay.png, attention.png, their JSON and analysis.md.",
    )
    add_model_arguments(p)
    p.add_argument("--adapter", help="LRS adapter (folder or Hub id) to compare with the base model")
    p.add_argument(
        "--variant",
        help="instead of --adapter, any variant spec of `eval` (uniform:1.25, linear:2+adapter:PATH, ...)",
    )
    p.add_argument("--out", type=Path, default=Path("analysis"), help="output folder")
    p.add_argument("--what", default="decay,attention", help="decay, attention, or both")
    g = p.add_argument_group("decay bound")
    g.add_argument("--factors", type=_float_list, default=[1.25, 2.0], help="factors to draw besides 1 (base)")
    g.add_argument("--max-distance", type=int, help="largest relative distance (default: the model's positions)")
    g.add_argument("--head-dim", type=int, help="rotated channels per head (default: from the model config)")
    g.add_argument("--theta", type=float, help="RoPE base (default: from the model config)")
    add_task_arguments(p, default_samples=4)
    g = p.add_argument_group("attention shares")
    g.add_argument("--skip-first", type=int, default=1, help="leave out the first N tokens (the attention sink)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=run)


def _rope_numbers(config: Any) -> tuple[int, float]:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    params = dict(getattr(text, "rope_parameters", None) or {})
    if params and all(isinstance(v, dict) for v in params.values()):  # per layer type: the global one
        params = params.get("full_attention") or next(iter(params.values()))
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    rotary = int(head_dim * float(params.get("partial_rotary_factor", 1.0)))
    return rotary - rotary % 2, float(params.get("rope_theta", 10000.0))


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (EvalError, VariantError) as exc:
        raise CliError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:

    parts = [x.strip() for x in args.what.split(",") if x.strip()]
    if not parts or any(x not in PARTS for x in parts):
        raise CliError(f"--what takes decay, attention or both, got {args.what!r}")
    if args.adapter and args.variant:
        raise CliError("give --adapter or --variant, not both")
    spec = args.variant or (f"adapter:{args.adapter}" if args.adapter else None)
    variant = parse_variant(spec) if spec else None
    if variant is not None and variant.is_base:
        raise CliError("--variant base compares the base with itself; give an adapter or another variant")

    if args.head_dim is not None and (args.head_dim < 2 or args.head_dim % 2):
        raise CliError(
            f"--head-dim must be an even number >= 2 (the attention head size, e.g. 64), got {args.head_dim}"
        )
    check_out_folder(args.out)
    need_config = "attention" in parts or variant is not None or args.head_dim is None or args.theta is None
    path = config = None
    if need_config:
        path, config = checked_model_config(args.model)
    plans = check_variants([variant], config) if variant is not None else {}
    out: Path = args.out
    report: list[str] = [f"# Analysis of {args.model}", ""]

    # 1. decay (analytic)
    if "decay" in parts:
        head_dim, theta = _rope_numbers(config) if config is not None else (None, None)
        head_dim = args.head_dim or head_dim
        theta = args.theta or theta
        text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
        max_distance = args.max_distance or getattr(text, "max_position_embeddings", None) or 256
        factors, labels = [1.0], ["s = 1 (base RoPE)"]
        for f in args.factors:
            if f != 1.0:
                factors.append(f)
                labels.append(f"s = {f:g}")
        if variant is not None:
            factors_l = _variant_factors(variant, plans, config)
            if factors_l:
                lo, hi = min(factors_l), max(factors_l)
                for value, which in sorted({(lo, "smallest"), (hi, "largest")}):
                    layer = factors_l.index(value)
                    factors.append(value)
                    labels.append(f"{variant.name}: {which} factor {value:.3g} (layer {layer})")
        if max_distance < 1:
            raise CliError(f"--max-distance must be >= 1, got {max_distance}")
        data = decay_curves(factors, max_distance=max_distance, head_dim=head_dim, theta=theta, labels=labels)
        out.mkdir(parents=True, exist_ok=True)
        (out / "decay.json").write_text(json.dumps(data) + "\n")
        plot_decay(data, out / "decay.png")
        report += [
            "## RoPE long-term decay (RoFormer section 3.4.3)",
            "",
            f"Relative upper bound (1/(d/2)) sum_j |S_j| by relative distance, head_dim {head_dim}, theta {theta:g}. "
            "A factor s divides every frequency by s and stretches the curve by s along the distance axis: "
            "larger factors decay more slowly.",
            "",
            "![decay](decay.png)",
            "",
        ]
        print(f"decay bound for factors {', '.join(f'{f:g}' for f in factors)} -> {out / 'decay.png'}")

    # 2. attention shares (eager attention, model weights)
    if "attention" in parts:
        report += _attention(args, ev, path, config, variant, plans, out)

    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.md").write_text("\n".join(report) + "\n")
    print(f"wrote {out / 'analysis.md'}")
    return 0


def _variant_factors(variant: Any, plans: dict, config: Any) -> list[float] | None:
    """Per-layer factors of a variant relative to plain RoPE, or None when no single factor describes a layer.

    An LRS factor s on a linear-RoPE model with factor f acts like linear scaling by f * s; Dynamic NTK and YaRN
    change the frequencies non-uniformly, so their curves are not drawn.
    """
    if variant.rope_type not in (None, "linear"):
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = getattr(text, "num_hidden_layers", 1)
    if variant.uniform is not None:
        factors = [variant.uniform] * layers
    elif variant.name in plans:
        factors = list(plans[variant.name].factors)
    else:
        factors = [1.0] * layers
    scale = float(variant.rope_factor) if variant.rope_type == "linear" else 1.0
    return [f * scale for f in factors]


def _attention(args: argparse.Namespace, ev: Any, path: Any, config: Any, variant: Any, plans: dict, out: Path):

    if args.task not in ev.POSITION_TASKS:
        raise CliError(f"attention shares need prompts: --task {', '.join(ev.POSITION_TASKS)}")
    if args.skip_first < 0:
        raise CliError(f"--skip-first must be >= 0, got {args.skip_first}")
    tokenizer = ev.load_tokenizer(path)
    kwargs = checked_task_kwargs(args.task, task_kwargs(args))
    task, samples = ev.make_task_samples(
        args.task, num_samples=args.num_samples, seed=args.seed, held_out_after=args.held_out_after, **kwargs
    )
    chat = chat_template_flag(args.chat_template, tokenizer)
    prepared = ev.prepare_samples(samples, tokenizer, task, chat_template=chat, system_prompt=args.system_prompt)
    sequences = prepared.prompt_ids
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    ev.check_context([len(s) for s in sequences], getattr(text, "max_position_embeddings", None))
    device = checked_device(args.device)
    print(f"attention shares on {len(sequences)} {args.task} prompt(s); loading {args.model} ({device})")
    model, _ = ev.load_model(path, dtype=args.dtype, device=device)
    variants = [Variant("base")] + ([variant] if variant is not None else [])
    entries = []
    for v in variants:
        with build_variant(model, v, plans.get(v.name)) as built:
            shares = last_token_attention_shares(
                built, sequences, skip_first=args.skip_first, progress=not args.no_progress
            )
        entries.append({"name": v.name, "spec": v.spec, "shares": shares.tolist()})
        print(
            f"  {v.name:<24} mean share "
            + ", ".join(f"{r} {x:.3f}" for r, x in zip(REGIONS, shares.mean(0), strict=True))
        )
    data = {
        "regions": list(REGIONS),
        "skip_first": args.skip_first,
        "num_samples": len(sequences),
        "task": args.task,
        "model": str(args.model),
        "prompt_tokens": {"min": min(map(len, sequences)), "max": max(map(len, sequences))},
        "chat_template": chat,
        "variants": entries,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "attention.json").write_text(json.dumps(data, indent=1) + "\n")
    plot_attention_shares(data, out / "attention.png")
    lines = [
        "## Where the last token's attention lands",
        "",
        f"Per decoder layer, the share of the last prompt token's attention (mean over heads and {len(sequences)} "
        f"{args.task} prompts of {data['prompt_tokens']['min']}–{data['prompt_tokens']['max']} tokens) on the "
        f"beginning, middle and end thirds of the prompt"
        + (f", the first {args.skip_first} token(s) left out" if args.skip_first else "")
        + ". Eager attention, this analysis only.",
        "",
        "![attention](attention.png)",
        "",
        "| variant | beginning | middle | end |",
        "|---|---|---|---|",
    ]
    for e in entries:
        mean = [sum(row[i] for row in e["shares"]) / len(e["shares"]) for i in range(len(REGIONS))]
        lines.append(f"| `{e['name']}` | " + " | ".join(f"{x:.3f}" for x in mean) + " |")
    lines.append("")
    return lines
