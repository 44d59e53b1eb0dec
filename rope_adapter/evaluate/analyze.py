"""``run_analysis(AnalyzeSettings)``: what ``rope-adapter analyze`` runs, from Python.

(1) RoFormer's relative upper bound of RoPE attention by relative distance for chosen factors (analytic, no
weights), (2) per decoder layer, the share of the last token's attention on the beginning, middle and end of
task prompts, base vs one variant (eager attention), and (3) per decoder layer, the sensitivity of the whole gold
answer's log-prob to that layer's factor, d score / d log s_l, at the base and at the variant's factors
(autograd, :mod:`rope_adapter.evaluate.sensitivity`). Writes ``decay``, ``attention`` and ``sensitivity``
``.json``/``.png`` and ``analysis.md``. Every input is checked before anything is written or loaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rope_adapter import files
from rope_adapter.numbers import as_int, as_real, as_reals
from rope_adapter.scoring.loading import EvalError
from rope_adapter.scoring.tasks import position_tasks
from rope_adapter.scoring.variants import Variant, build_variant, check_variants, parse_variant

from . import evaluation as ev
from .analysis import REGIONS, decay_curves, last_token_attention_shares
from .own_outputs import ANALYZE_STAMP
from .plots import plot_attention_shares, plot_decay
from .run import (
    SampleSettings,
    chat_template_flag,
    check_out_folder,
    checked_device,
    checked_model_config,
    load_tokenizer,
    load_weights,
)
from .sensitivity_report import sensitivity_section

PARTS = ("decay", "attention", "sensitivity")
PROMPT_PARTS = ("attention", "sensitivity")  # the parts that run the model on task prompts


MAX_DISTANCE = 1 << 20
"""Largest ``--max-distance``: the decay bound holds a value per distance and channel pair (1M x 32 pairs x 8 bytes
is about 270 MB per factor)."""


@dataclass
class AnalyzeSettings(SampleSettings):
    """One analysis; the fields are ``rope-adapter analyze``'s flags. Checked when made."""

    out: str | Path = "analysis"
    num_samples: int = 4
    variant: str | None = None
    what: str = "decay,attention"
    factors: list[float] = field(default_factory=lambda: [1.25, 2.0])
    max_distance: int | None = None
    head_dim: int | None = None
    theta: float | None = None
    skip_first: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        self.factors = as_reals(self.factors, "--factors", error=EvalError)
        for name in ("max_distance", "head_dim"):
            setattr(
                self, name, as_int(getattr(self, name), f"--{name.replace('_', '-')}", error=EvalError, optional=True)
            )
        self.skip_first = as_int(self.skip_first, "--skip-first", error=EvalError)
        self.theta = as_real(self.theta, "--theta (the RoPE base)", error=EvalError, optional=True, finite=False)
        if not self.parts or any(x not in PARTS for x in self.parts):
            raise EvalError(f"--what takes a comma-separated list of {', '.join(PARTS)}, got {self.what!r}")
        if self.adapter and self.variant:
            raise EvalError("give --adapter or --variant, not both")
        if self.head_dim is not None and (self.head_dim < 2 or self.head_dim % 2):
            raise EvalError(
                f"--head-dim must be an even number >= 2 (the attention head size, e.g. 64), got {self.head_dim}"
            )
        if any(not f > 0 for f in self.factors):
            raise EvalError(f"--factors must be > 0, got {self.factors}")
        if self.max_distance is not None and not 1 <= self.max_distance <= MAX_DISTANCE:
            raise EvalError(
                f"--max-distance must be between 1 and {MAX_DISTANCE} (the decay bound is computed at every "
                f"distance, in memory), got {self.max_distance}"
            )
        if self.theta is not None and not (math.isfinite(self.theta) and self.theta > 1):
            raise EvalError(f"--theta (the RoPE base) must be a finite number > 1, e.g. 10000, got {self.theta}")
        if self.skip_first < 0:
            raise EvalError(f"--skip-first must be >= 0, got {self.skip_first}")
        if set(PROMPT_PARTS) & set(self.parts) and self.task.name not in position_tasks():
            raise EvalError(f"attention shares and sensitivity need prompts: --task {', '.join(position_tasks())}")

    @property
    def parts(self) -> list[str]:
        return [x.strip() for x in self.what.split(",") if x.strip()]


def rope_numbers(config: Any) -> tuple[int, float]:
    """(rotated channels per head, RoPE base) of a model config (the global layer type's on Gemma3-style ones)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    params = dict(getattr(text, "rope_parameters", None) or {})
    if params and all(isinstance(v, dict) for v in params.values()):  # per layer type: the global one
        params = params.get("full_attention") or next(iter(params.values()))
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    rotary = int(head_dim * float(params.get("partial_rotary_factor", 1.0)))
    return rotary - rotary % 2, float(params.get("rope_theta", 10000.0))


def variant_factors(variant: Variant, plans: dict, config: Any) -> list[float] | None:
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


def run_analysis(settings: AnalyzeSettings, log: Callable[[str], None] = print) -> dict[str, Path]:
    """Check everything, then draw the decay bound and/or measure attention shares; the files written."""
    s = settings
    spec = s.variant or (f"adapter:{s.adapter}" if s.adapter else None)
    variant = parse_variant(spec) if spec else None
    if variant is not None and variant.is_base:
        raise EvalError("--variant base compares the base with itself; give an adapter or another variant")
    check_out_folder(s.out, "analyze")
    if "sensitivity" in s.parts and variant is not None and variant.rope_type is not None:
        raise EvalError(
            f"sensitivity is taken in the LRS factors only; {variant.spec!r} changes the RoPE type: give an "
            "adapter or uniform:S variant, or leave sensitivity out of --what"
        )
    need_config = bool(set(PROMPT_PARTS) & set(s.parts)) or variant is not None or s.head_dim is None or s.theta is None
    path = config = None
    if need_config:
        path, config = checked_model_config(s.model.name)
    plans = check_variants([variant], config) if variant is not None else {}
    out = Path(s.out)
    report: list[str] = [f"# Analysis of {s.model.name}", ""]
    paths: dict[str, Path] = {}
    # the prompts are made and checked against the model's positions before the first file is written
    prompts = _Prompts(s, path, config, log) if set(PROMPT_PARTS) & set(s.parts) else None
    if "decay" in s.parts:
        report += _decay(s, config, variant, plans, out, paths, log)
    if prompts is not None:
        if "attention" in s.parts:
            report += _attention(s, prompts, variant, plans, out, paths, log)
        if "sensitivity" in s.parts:
            points: list[tuple[str, list[float] | None]] = [("base", None)]
            if variant is not None:
                points.append((variant.name, variant_factors(variant, plans, config)))
            report += sensitivity_section(
                prompts.task, prompts.model, points, out, paths, log, progress=s.progress, model_name=s.model.name
            )
    out.mkdir(parents=True, exist_ok=True)
    paths["markdown"] = out / "analysis.md"
    files.write_text(paths["markdown"], "\n".join(report) + "\n")
    return paths


def _decay(s: AnalyzeSettings, config: Any, variant: Any, plans: dict, out: Path, paths: dict, log: Any) -> list[str]:
    head_dim, theta = rope_numbers(config) if config is not None else (None, None)
    head_dim = s.head_dim or head_dim
    theta = s.theta if s.theta is not None else theta
    text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    max_distance = s.max_distance or getattr(text, "max_position_embeddings", None) or 256
    factors, labels = [1.0], ["s = 1 (base RoPE)"]
    for f in s.factors:
        if f != 1.0:
            factors.append(f)
            labels.append(f"s = {f:g}")
    if variant is not None:
        factors_l = variant_factors(variant, plans, config)
        if factors_l:
            lo, hi = min(factors_l), max(factors_l)
            for value, which in sorted({(lo, "smallest"), (hi, "largest")}):
                factors.append(value)
                labels.append(f"{variant.name}: {which} factor {value:.3g} (layer {factors_l.index(value)})")
    data = {
        "written_by": ANALYZE_STAMP,
        **decay_curves(factors, max_distance=max_distance, head_dim=head_dim, theta=theta, labels=labels),
    }
    out.mkdir(parents=True, exist_ok=True)
    paths["decay_json"] = out / "decay.json"
    files.write_json(paths["decay_json"], data, indent=None)
    plot_decay(data, out / "decay.png")
    paths["decay_plot"] = out / "decay.png"
    log(f"decay bound for factors {', '.join(f'{f:g}' for f in factors)} -> {out / 'decay.png'}")
    return [
        "## RoPE long-term decay (RoFormer section 3.4.3)",
        "",
        f"Relative upper bound (1/(d/2)) sum_j |S_j| by relative distance, head_dim {head_dim}, theta {theta:g}. "
        "A factor s divides every frequency by s and stretches the curve by s along the distance axis: "
        "larger factors decay more slowly.",
        "",
        "![decay](decay.png)",
        "",
    ]


class _Prompts:
    """The task's prompts, tokenised and checked against the model's context; the model loaded once, on demand."""

    def __init__(self, s: AnalyzeSettings, path: Any, config: Any, log: Callable[[str], None]) -> None:
        self.path, self.config, self.log, self.settings = path, config, log, s
        tokenizer = load_tokenizer(s.model, path)
        task, samples = ev.make_task_samples(
            s.task.name, num_samples=s.num_samples, seed=s.task.seed, held_out_after=s.held_out_after, **s.task_kwargs()
        )
        self.chat = chat_template_flag(s.task, tokenizer)
        self.task = ev.prepare_samples(samples, tokenizer, task, chat_template=self.chat, system_prompt=s.system_prompt)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        ev.check_context([len(x) for x in self.task.full_ids], getattr(text, "max_position_embeddings", None))
        self.device = checked_device(s.model.device)
        self._model: Any = None

    def model(self) -> Any:
        if self._model is None:
            self.log(f"loading {self.settings.model.name} ({self.device})")
            self._model = load_weights(self.settings.model, self.path, self.device)
        return self._model


def _attention(
    s: AnalyzeSettings, prompts: _Prompts, variant: Any, plans: dict, out: Path, paths: dict, log: Any
) -> list[str]:
    sequences = prompts.task.prompt_ids
    log(f"attention shares on {len(sequences)} {s.task.name} prompt(s)")
    model = prompts.model()
    entries = []
    for v in [Variant("base")] + ([variant] if variant is not None else []):
        with build_variant(model, v, plans.get(v.name)) as built:
            shares = last_token_attention_shares(built, sequences, skip_first=s.skip_first, progress=s.progress)
        entries.append({"name": v.name, "spec": v.spec, "shares": shares.tolist()})
        log(
            f"  {v.name:<24} mean share "
            + ", ".join(f"{r} {x:.3f}" for r, x in zip(REGIONS, shares.mean(0), strict=True))
        )
    tokens = {"min": min(map(len, sequences)), "max": max(map(len, sequences))}
    data = {
        "written_by": ANALYZE_STAMP,
        "regions": list(REGIONS),
        "skip_first": s.skip_first,
        "num_samples": len(sequences),
        "task": s.task.name,
        "model": s.model.name,
        "prompt_tokens": tokens,
        "chat_template": prompts.chat,
        "variants": entries,
    }
    out.mkdir(parents=True, exist_ok=True)
    paths["attention_json"] = out / "attention.json"
    files.write_json(paths["attention_json"], data)
    plot_attention_shares(data, out / "attention.png")
    paths["attention_plot"] = out / "attention.png"
    lines = [
        "## Where the last token's attention lands",
        "",
        f"Per decoder layer, the share of the last prompt token's attention (mean over heads and {len(sequences)} "
        f"{s.task.name} prompts of {tokens['min']}–{tokens['max']} tokens) on the beginning, middle and end thirds of "
        "the prompt"
        + (f", the first {s.skip_first} token(s) left out" if s.skip_first else "")
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
