"""Extrapolation: perplexity by context length for RoPE variants (``rope-adapter eval --task perplexity``).

The paper's claim is that layer-specific interpolation also helps length extrapolation when combined with
position interpolation (PI, transformers' ``linear``) or Dynamic NTK. This module measures it::

    lengths = parse_lengths("2k,4k,8k,16k")
    windows = length_windows("book.txt", tokenizer, lengths, num_windows=4)   # before the model loads
    variants = parse_variants("base,linear:2,dynamic:2,linear:2+adapter:out/adapter,dynamic:2+adapter:out/adapter")
    result = evaluate_lengths(model, windows, variants, plans=check_variants(variants, config))
    result.write("extrapolation")                                          # results.json/.md, lengths.png

Windows come from the shared task registry (``get_task("perplexity")``): windows of exactly ``L`` tokens that
slide through the text by ``stride`` tokens (default ``L``: no overlap), at most ``num_windows`` per length. Each window is scored in full: every token after the first, given all the tokens
before it in the window.

Memory: a window runs through the decoder in ONE forward pass without a KV cache (so Dynamic NTK sees the
whole length, as in a plain forward), and only its final hidden states ``[L, hidden]`` are kept; the language
model head then runs ``chunk_tokens`` rows at a time, each chunk's logits reduced to the gold tokens'
log-probabilities at once. At no time are more than ``chunk_tokens`` rows of logits alive (at 16k tokens and a
49k vocabulary the full logits would take 3.2 GB in float32). Logit soft-capping (Gemma 2) is applied as the
model's own head does.

Lengths run in increasing order for every variant (Dynamic NTK's cached frequencies only grow).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from rope_adapter.json_types import JsonObject, JsonValue
from rope_adapter.scoring.intervals import DifferenceEntry, mean_interval, paired_t_interval
from rope_adapter.scoring.variants import AdapterPlan, Variant, describe_variant

from .evaluation import EvalError, check_reference, iter_variants, make_task
from .report import lengths_markdown
from .results import (
    LengthSettings,
    LengthSummary,
    Perplexity,
    SweepResults,
    WindowRow,
    environment,
    evaluated_variant,
)

_LENGTH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_lengths(text: str | Sequence[int | str]) -> list[int]:
    """``"2k,4k,8k,16k"`` -> ``[2048, 4096, 8192, 16384]`` (k = 1024 tokens), sorted, distinct, >= 2."""
    items = text.split(",") if isinstance(text, str) else list(text)
    lengths = []
    for item in items:
        if isinstance(item, int):
            value = item
        else:
            match = _LENGTH.match(str(item))
            if not match:
                raise EvalError(f"cannot read the length {str(item)!r}; write tokens as 2048 or 2k (k = 1024)")
            scale = {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
            value = float(match.group(1)) * scale
            if value != int(value):
                raise EvalError(f"length {str(item)!r} is not a whole number of tokens")
            value = int(value)
        if value < 2:
            raise EvalError(f"a context length must be >= 2 tokens, got {item!r}")
        lengths.append(value)
    if not lengths:
        raise EvalError("no context lengths given; for example: --lengths 2k,4k,8k")
    if len(set(lengths)) != len(lengths):
        raise EvalError(f"context lengths must be distinct, got {items}")
    return sorted(lengths)


def default_extrapolation_variants(lengths: Sequence[int], max_positions: int, adapter: str | None = None) -> str:
    """``base,linear:F,dynamic:F`` (+ both with the adapter), F = the longest length over the trained context."""
    factor = max(2, math.ceil(max(lengths) / max_positions))
    specs = ["base", f"linear:{factor}", f"dynamic:{factor}"]
    if adapter:
        specs += [f"linear:{factor}+adapter:{adapter}", f"dynamic:{factor}+adapter:{adapter}"]
    return ",".join(specs)


def length_windows(
    data_path: str | os.PathLike[str],
    tokenizer: Any,
    lengths: Sequence[int],
    *,
    num_windows: int = 4,
    stride: int | None = None,
    add_special_tokens: bool = True,
) -> dict[int, list[list[int]]]:
    """Token windows of exactly ``L`` tokens for each length, from the perplexity task of the registry.

    Raises :class:`EvalError` (or ``FileNotFoundError``) when the file is missing, empty or too short for one
    window of the longest length; the model is not needed.
    """
    if num_windows < 1:
        raise EvalError(f"the window count must be >= 1, got {num_windows}")
    if stride is not None and stride < 1:
        raise EvalError(f"the stride must be >= 1 token, got {stride}")
    out: dict[int, list[list[int]]] = {}
    for length in sorted(lengths):
        # cut a few tokens longer than L, then keep exactly L: re-tokenising a window cut at token offsets (and
        # stripped of surrounding whitespace) gives about, not exactly, the tokens it was cut at
        slack = 8 + length // 100
        task = make_task(
            "perplexity",
            data_path=str(data_path),
            window_tokens=length + slack,
            stride=stride or length,
            tokenizer=tokenizer,
        )
        try:
            records = task.load_records()
        except ValueError as exc:
            raise EvalError(str(exc)) from exc
        windows: list[list[int]] = []
        for sample in task.build_samples(records):
            ids = list(tokenizer(sample.target, add_special_tokens=add_special_tokens)["input_ids"])
            if len(ids) >= length:
                windows.append(ids[:length])
            if len(windows) == num_windows:
                break
        if not windows:
            total = len(tokenizer(Path(data_path).read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"])
            raise EvalError(
                f"{data_path} has {total} tokens, too few for one window of {length} tokens; "
                "give a longer text or shorter --lengths"
            )
        out[length] = windows
    return out


def _text_config(model: torch.nn.Module) -> Any:
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


@torch.inference_mode()
def window_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, *, chunk_tokens: int = 1024) -> torch.Tensor:
    """Log-probability of every token after the first, ``[batch, L - 1]`` float64 on the CPU.

    One decoder pass (no KV cache) keeps only the final hidden states; the LM head runs on at most
    ``chunk_tokens`` rows (batch x positions) at a time, and each chunk of logits is reduced to the gold tokens'
    log-probabilities before the next.
    """
    if chunk_tokens < 1:
        raise EvalError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if input_ids.dim() != 2 or input_ids.shape[1] < 2:
        raise EvalError(f"input_ids must be [batch, length >= 2], got {list(input_ids.shape)}")
    hf = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = hf.get_decoder(), hf.get_output_embeddings()
    cap = getattr(_text_config(hf), "final_logit_softcapping", None)
    device = next(hf.parameters()).device
    ids = input_ids.to(device)
    hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
    length = ids.shape[1]
    out = torch.empty((ids.shape[0], length - 1), dtype=torch.float64)
    step = max(1, chunk_tokens // ids.shape[0])  # rows of logits = batch x step <= chunk_tokens
    for start in range(0, length - 1, step):
        stop = min(start + step, length - 1)
        logits = head(hidden[:, start:stop]).float()
        if cap:
            logits = torch.tanh(logits / cap) * cap
        gold = ids[:, start + 1 : stop + 1, None]
        out[:, start:stop] = (logits.log_softmax(-1).gather(-1, gold)[..., 0]).double().cpu()
        del logits
    return out


@dataclass(kw_only=True)
class LengthResults(SweepResults[WindowRow, LengthSettings]):
    """Per-window log-likelihoods for every variant and length, with perplexities and 95 % intervals."""

    KIND = "lengths"
    ROWS_KEY = "windows"
    FIGURE = "lengths.png"

    lengths: list[int]

    def window_loglik(self, variant: str, length: int) -> np.ndarray:
        """Mean log-likelihood per token of each window (nats), in window order."""
        return np.array(
            [r["loglik"] for r in self.rows if r["variant"] == variant and r["length"] == length], dtype=np.float64
        )

    def perplexity(self, variant: str, length: int) -> Perplexity:
        """Token-weighted perplexity with a 95 % interval from the spread of the windows' log-likelihoods."""
        rows = [r for r in self.rows if r["variant"] == variant and r["length"] == length]
        tokens = np.array([r["tokens"] for r in rows], dtype=np.float64)
        loglik = np.array([r["loglik"] for r in rows], dtype=np.float64)
        mean = float((loglik * tokens).sum() / tokens.sum())
        interval = mean_interval(loglik, self.confidence)
        half = None if interval.low is None else (interval.high - interval.low) / 2
        return {
            "perplexity": math.exp(-mean),
            "ci_low": None if half is None else math.exp(-(mean + half)),
            "ci_high": None if half is None else math.exp(-(mean - half)),
            "loglik": mean,
            "windows": len(rows),
            "tokens": int(tokens.sum()),
        }

    def summary(self) -> dict[str, LengthSummary]:
        return {
            name: {"by_length": {str(n): self.perplexity(name, n) for n in self.lengths}} for name in self.variant_names
        }

    def comparisons(self) -> dict[str, dict[str, DifferenceEntry]]:
        """Paired per-window log-likelihood differences from the reference (positive: the variant is better)."""
        return {
            name: {
                str(n): paired_t_interval(
                    self.window_loglik(name, n), self.window_loglik(self.reference, n), confidence=self.confidence
                ).to_dict()
                for n in self.lengths
            }
            for name in self.variant_names
            if name != self.reference
        }

    def head(self) -> JsonObject:
        return {"task": "perplexity", "lengths": self.lengths}

    def renderers(self) -> tuple[Callable[..., Path], Callable[..., str]]:
        from .plots import plot_lengths  # matplotlib (about 1 s) loads only when results are written

        return plot_lengths, lengths_markdown


def evaluate_lengths(
    model: torch.nn.Module,
    windows: Mapping[int, Sequence[Sequence[int]]],
    variants: Sequence[Variant],
    *,  # as evaluate_positions: each sweep lists these keywords with its own defaults (one options object would hide them)
    plans: Mapping[str, AdapterPlan] | None = None,
    chunk_tokens: int = 1024,
    batch_size: int = 1,
    max_batch_tokens: int = 8192,
    reference: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    settings: Mapping[str, JsonValue] | None = None,
) -> LengthResults:
    """Perplexity of every variant on the same windows at every length (see the module docstring).

    ``batch_size`` windows of one length share a forward pass while ``batch_size * L <= max_batch_tokens``
    (long windows always run one at a time).
    """
    if not windows:
        raise EvalError("no windows to evaluate")
    reference = check_reference(variants, reference)
    if batch_size < 1:
        raise EvalError(f"batch_size must be >= 1, got {batch_size}")
    lengths = sorted(windows)
    rows: list[WindowRow] = []
    described = []
    total = sum(len(w) for w in windows.values())
    for variant, built in iter_variants(model, variants, plans, log):
        start_time = time.perf_counter()
        bar = tqdm(total=total, desc=f"perplexity {variant.name}", disable=not progress, unit="window")
        for length in lengths:
            group = list(windows[length])
            per_batch = max(1, min(batch_size, max_batch_tokens // length))
            for first in range(0, len(group), per_batch):
                chunk = group[first : first + per_batch]
                width = min(len(w) for w in chunk)
                ids = torch.tensor([list(w[:width]) for w in chunk], dtype=torch.long)
                logprobs = window_logprobs(built, ids, chunk_tokens=chunk_tokens).numpy()
                for offset, values in enumerate(logprobs):
                    loglik = float(values.mean())
                    rows.append(
                        {
                            "variant": variant.name,
                            "length": length,
                            "window": first + offset,
                            "tokens": int(values.size),
                            "loglik": loglik,
                            "perplexity": math.exp(-loglik),
                        }
                    )
                bar.update(len(chunk))
        bar.close()
        seconds = time.perf_counter() - start_time
        described.append(evaluated_variant(variant, describe_variant(built), seconds))
    all_settings: LengthSettings = {
        "num_windows": max(len(w) for w in windows.values()),
        "windows_by_length": {str(n): len(windows[n]) for n in lengths},
        "chunk_tokens": chunk_tokens,
        "batch_size": batch_size,
        "max_batch_tokens": max_batch_tokens,
        "max_position_embeddings": getattr(_text_config(model), "max_position_embeddings", None),
        "environment": environment(),
        **dict(settings or {}),
    }
    return LengthResults(lengths=lengths, variants=described, rows=rows, reference=reference, settings=all_settings)
