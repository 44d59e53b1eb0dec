"""What layer-specific scaling does to attention: RoPE's long-term decay bound and where attention lands.

Two analyses, both behind ``rope-adapter analyze``:

1. :func:`relative_upper_bound`, analytic. RoFormer (Su et al., 2021, section 3.4.3) bounds the RoPE attention
   logit between positions ``m`` and ``n`` by Abel summation::

       |sum_j h_j e^{i (m-n) theta_j}| <= (max_j |h_{j+1} - h_j|) * sum_{j=1}^{d/2} |S_j|,
       S_j = sum_{k=0}^{j-1} e^{i (m-n) theta_k},

   and plots the *relative upper bound* ``(1 / (d/2)) sum_{j=1}^{d/2} |S_j|`` against the relative distance
   ``m - n``: it decays as the distance grows. Scaling a layer by ``s`` divides every ``theta_k`` by ``s``, so
   the layer's curve is the base curve stretched by ``s`` along the distance axis: ``B_s(r) = B_1(r / s)``.
   Factors above 1 slow the decay, which is how LRS lets later layers attend further into the middle.

2. :func:`last_token_attention_shares`, measured. For each prompt, the share of the last token's attention (mean
   over heads) that lands on the beginning, middle and end thirds of the context, per decoder layer. It runs the
   prompt minus its last token with a KV cache, then the last token alone with ``output_attentions=True``, so
   only ``[heads, 1, length]`` attention rows are ever returned. Attention weights exist only with eager
   attention: :func:`eager_attention` switches a model to it for the duration (never use it for evaluation).

Pure maths and torch; no plotting, no Optuna, no Hub.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, TypedDict

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from rope_adapter.errors import LrsError

REGIONS = ("beginning", "middle", "end")


# ---------------------------------------------------------------------------------------------------- decay


def rope_inv_freq(head_dim: int, theta: float = 10000.0) -> np.ndarray:
    """Default RoPE inverse frequencies ``theta^(-2k/d)`` for ``k = 0 .. d/2 - 1``."""
    if head_dim < 2 or head_dim % 2:
        raise LrsError(f"head_dim must be an even number >= 2, got {head_dim}")
    if not theta > 1.0:
        raise LrsError(f"theta must be > 1, got {theta}")
    return theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def relative_upper_bound(
    distances: Sequence[float] | np.ndarray,
    *,
    head_dim: int = 128,
    theta: float = 10000.0,
    factor: float = 1.0,
    inv_freq: Sequence[float] | np.ndarray | None = None,
) -> np.ndarray:
    """RoFormer's relative upper bound ``(1/(d/2)) sum_{j=1}^{d/2} |S_j(r)|`` at each relative distance ``r``.

    Args:
        distances: relative distances ``m - n`` (tokens; any real values).
        head_dim: rotated channels per head ``d`` (ignored when ``inv_freq`` is given).
        theta: RoPE base (ignored when ``inv_freq`` is given).
        factor: the layer's scaling factor ``s``: frequencies are divided by it (``s = 1``: plain RoPE).
        inv_freq: the model's own inverse frequencies (e.g. after linear/YaRN scaling) instead of the default.

    Returns:
        float64 array shaped like ``distances``; ``(d/2 + 1) / 2`` at distance 0 (every ``|S_j| = j``).
    """
    if not np.isfinite(factor) or factor <= 0:
        raise LrsError(f"factor must be finite and > 0, got {factor}")
    freqs = rope_inv_freq(head_dim, theta) if inv_freq is None else np.asarray(inv_freq, dtype=np.float64)
    if freqs.ndim != 1 or freqs.size == 0:
        raise LrsError("inv_freq must be a non-empty vector")
    r = np.asarray(distances, dtype=np.float64)
    out = np.empty(r.shape, dtype=np.float64)
    flat_r, flat_out = r.reshape(-1), out.reshape(-1)
    step = 4096  # bound the [distances, d/2] complex intermediate
    for start in range(0, flat_r.size, step):
        block = flat_r[start : start + step]
        phases = np.exp(1j * block[:, None] * (freqs[None, :] / factor))
        partial = np.cumsum(phases, axis=1)  # S_1 .. S_{d/2}
        flat_out[start : start + step] = np.abs(partial).mean(axis=1)
    return out


class _DecayCurveRequired(TypedDict):
    factor: float
    label: str
    bound: list[float]  # per distance (linear) or the bin means (log)


class DecayCurve(_DecayCurveRequired, total=False):
    """One factor's bound; on the log scale with each bin's range."""

    bound_min: list[float]
    bound_max: list[float]


class DecayCurves(TypedDict):
    """What :func:`decay_curves` returns (and decay.json holds, with analyze's own keys)."""

    head_dim: int
    theta: float
    max_distance: int
    scale: Literal["linear", "log"]
    distances: list[float]  # integer distances (linear) or the bins' geometric centres (log)
    curves: list[DecayCurve]


def decay_curves(
    factors: Sequence[float],
    *,
    max_distance: int,
    head_dim: int = 128,
    theta: float = 10000.0,
    labels: Sequence[str] | None = None,
    linear_up_to: int = 1024,
    bins: int = 120,
) -> DecayCurves:
    """The bound for several factors, ready to plot (what decay.json holds).

    Up to ``linear_up_to`` tokens every integer distance is kept (``scale`` "linear", as RoFormer's Figure 2).
    Beyond, the bound oscillates fast: it is computed at every integer distance and summarised in ``bins``
    log-spaced bins from 1 to ``max_distance`` (``scale`` "log"): ``bound`` is the bin mean, ``bound_min`` and
    ``bound_max`` its range, ``distances`` the bins' geometric centres.
    """
    if max_distance < 1:
        raise LrsError(f"max_distance must be >= 1, got {max_distance}")
    if not factors:
        raise LrsError("give at least one factor")
    labels = list(labels) if labels is not None else [f"s = {f:g}" for f in factors]
    if len(labels) != len(factors):
        raise LrsError("one label per factor")
    curves: list[DecayCurve] = []
    if max_distance <= linear_up_to:
        scale: Literal["linear", "log"] = "linear"
        distances = np.arange(max_distance + 1)
        shown = distances.tolist()
        for f, label in zip(factors, labels, strict=True):
            bound = relative_upper_bound(distances, head_dim=head_dim, theta=theta, factor=f)
            curves.append({"factor": float(f), "label": label, "bound": bound.tolist()})
    else:
        edges = np.unique(np.geomspace(1, max_distance + 1, bins + 1).astype(np.int64))
        distances = np.arange(1, max_distance + 1)
        index = np.searchsorted(edges, distances, side="right") - 1  # bin of each distance
        centres = [
            float(np.sqrt(a * (b - 1))) if b - 1 > a else float(a) for a, b in zip(edges[:-1], edges[1:], strict=True)
        ]
        scale, shown = "log", centres
        for f, label in zip(factors, labels, strict=True):
            bound = relative_upper_bound(distances, head_dim=head_dim, theta=theta, factor=f)
            groups = [bound[index == i] for i in range(len(edges) - 1)]
            curves.append(
                {
                    "factor": float(f),
                    "label": label,
                    "bound": [float(g.mean()) for g in groups],
                    "bound_min": [float(g.min()) for g in groups],
                    "bound_max": [float(g.max()) for g in groups],
                }
            )
    return {
        "head_dim": int(head_dim),
        "theta": float(theta),
        "max_distance": int(max_distance),
        "scale": scale,
        "distances": shown,
        "curves": curves,
    }


# ---------------------------------------------------------------------------------------------------- attention


def _hf_model(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[nn.Module]:
    """Switch ``model`` (or the model inside a PEFT wrapper) to eager attention, and back afterwards."""
    hf = _hf_model(model)
    before = getattr(hf.config, "_attn_implementation", None)
    if before != "eager":
        hf.set_attn_implementation("eager")
    try:
        yield model
    finally:
        if before is not None and before != "eager":
            hf.set_attn_implementation(before)


def region_bounds(length: int, parts: int = 3, skip_first: int = 0) -> list[tuple[int, int]]:
    """``parts`` contiguous, near-equal ``[start, stop)`` spans covering tokens ``skip_first .. length - 1``."""
    if parts < 1:
        raise LrsError(f"parts must be >= 1, got {parts}")
    if skip_first < 0:
        raise LrsError(f"skip_first must be >= 0, got {skip_first}")
    usable = length - skip_first
    if usable < parts:
        raise LrsError(f"a context of {length} tokens (first {skip_first} left out) cannot be cut into {parts}")
    edges = [skip_first + round(i * usable / parts) for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def region_shares(row: torch.Tensor, length: int, parts: int = 3, skip_first: int = 0) -> np.ndarray:
    """Shares of one attention row ``[kv]`` (the last ``kv`` of ``length`` positions) per region, summing to 1.

    A sliding-window layer's row covers only the last positions; the regions are still those of the whole
    context, so its beginning share is 0 when the window does not reach back there.
    """
    row = row.double().cpu()
    kv = row.shape[-1]
    offset = length - kv
    if offset < 0:
        raise LrsError(f"attention row over {kv} positions for a context of {length}")
    weights = np.zeros(length)
    weights[offset:] = row.numpy()
    shares = np.array([weights[a:b].sum() for a, b in region_bounds(length, parts, skip_first)])
    total = shares.sum()
    return shares / total if total > 0 else shares


@torch.inference_mode()
def last_token_attention_shares(
    model: nn.Module,
    sequences: Sequence[Sequence[int]],
    *,
    parts: int = 3,
    skip_first: int = 1,
    progress: bool = False,
) -> np.ndarray:
    """Per layer, the mean share of the last token's attention on each of ``parts`` context regions.

    Args:
        model: a causal LM (plain or with an LRS adapter); switched to eager attention while it runs.
        sequences: token ids of each prompt; the last token is the one whose attention is measured.
        parts: regions the context (all tokens, the last one included) is cut into: 3 = beginning/middle/end.
        skip_first: leave out the first tokens (the attention sink), renormalising over the rest.
        progress: show a tqdm bar.

    Returns:
        ``[num_layers, parts]`` float64: rows sum to 1; mean over heads and prompts.
    """
    if not sequences:
        raise LrsError("no prompts to analyse")
    hf = _hf_model(model)
    device = next(hf.parameters()).device
    total: np.ndarray | None = None
    with eager_attention(model):
        for seq in tqdm(list(sequences), desc="attention", disable=not progress):
            if len(seq) < parts + skip_first + 1:
                raise LrsError(f"a prompt of {len(seq)} tokens is too short to cut into {parts} regions")
            ids = torch.tensor([list(seq)], dtype=torch.long, device=device)
            prefix = model(input_ids=ids[:, :-1], use_cache=True, logits_to_keep=1)
            cache = getattr(prefix, "cache", None) or prefix.past_key_values
            out = model(
                input_ids=ids[:, -1:],
                cache=cache,
                use_cache=True,
                output_attentions=True,
                logits_to_keep=1,
                position_ids=torch.tensor([[len(seq) - 1]], device=device),
            )
            if not out.attentions or any(a is None for a in out.attentions):
                raise RuntimeError("the model returned no attention weights; it needs eager attention")
            shares = np.stack(
                [
                    np.mean(
                        [region_shares(head_row, len(seq), parts, skip_first) for head_row in layer[0, :, -1, :]],
                        axis=0,
                    )
                    for layer in out.attentions
                ]
            )
            total = shares if total is None else total + shares
    assert total is not None
    return total / len(sequences)
