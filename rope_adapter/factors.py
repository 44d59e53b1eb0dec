"""Pure functions for per-layer RoPE scaling: validating factors and computing a layer's (cos, sin).

Layer l rotates queries and keys with ``inv_freq / s_l`` (position interpolation per layer), where ``inv_freq``
is the base model's current inverse frequency vector (after its own RoPE type, e.g. linear, dynamic, YaRN) and
its ``attention_scaling`` is kept. With every ``s_l = 1`` the result is the base model's bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .errors import AdapterFileError, InvalidFactorsError


def validate_factors(factors: float | Sequence[float], num_layers: int) -> list[float]:
    """Return ``factors`` as a list of ``num_layers`` positive finite floats, or raise InvalidFactorsError.

    A single number means the same factor for every layer.
    """
    if isinstance(factors, int | float):
        factors = [float(factors)] * num_layers
    if isinstance(factors, torch.Tensor):
        factors = factors.detach().cpu().double().flatten().tolist()
    try:
        values = [float(f) for f in factors]
    except (TypeError, ValueError) as exc:
        raise InvalidFactorsError(f"factors must be numbers, got {factors!r}") from exc
    if len(values) != num_layers:
        raise InvalidFactorsError(
            f"got {len(values)} factors for a model with {num_layers} decoder layers: "
            f"give exactly one factor per layer (or a single number for all layers)"
        )
    bad = [(i, f) for i, f in enumerate(values) if not math.isfinite(f) or f <= 0]
    if bad:
        shown = ", ".join(f"layer {i}: {f}" for i, f in bad[:5])
        raise InvalidFactorsError(
            f"factors must be finite and > 0 ({shown}); 1.0 leaves a layer unchanged, "
            f"values above 1 interpolate positions (slower RoPE decay)"
        )
    return values


def check_factors_tensor(tensor: torch.Tensor, num_layers: int, where: str) -> None:
    """Check a stored factor tensor: float32, shape ``[num_layers]``, finite and positive."""
    if tensor.dtype != torch.float32:
        raise AdapterFileError(f"{where}: factors must be float32, found {tensor.dtype}")
    if tuple(tensor.shape) != (num_layers,):
        raise AdapterFileError(f"{where}: factors must have shape [{num_layers}], found {list(tensor.shape)}")
    if not bool(torch.isfinite(tensor).all()) or not bool((tensor > 0).all()):
        raise AdapterFileError(f"{where}: factors must be finite and > 0, found {tensor.tolist()}")


def scaled_inv_freqs(inv_freq: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """``inv_freq / s_l`` for every layer at once, each row doubled like the rotary embedding's channels:
    shape ``[num_layers, 2 * len(inv_freq)]`` (frequencies, not cos/sin tables; a few KB)."""
    scaled = inv_freq.to(device=factors.device, dtype=torch.float)[None, :] / factors[:, None]
    return torch.cat((scaled, scaled), dim=-1)


def cos_sin(
    positions: torch.Tensor, doubled_inv_freq: torch.Tensor, attention_scaling: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' rotary forward for float ``positions`` (``position_ids[..., None].float()``), bit for bit.

    ``doubled_inv_freq`` is ``cat(inv_freq, inv_freq)``: multiplying by it equals transformers'
    ``cat(freqs, freqs)`` element for element, one operation fewer per layer. Multiplying by an attention scaling
    of exactly 1.0 and casting to float32 are identities, so they are skipped.
    """
    emb = positions * doubled_inv_freq
    cos, sin = emb.cos(), emb.sin()
    if attention_scaling != 1.0:
        cos, sin = cos * attention_scaling, sin * attention_scaling
    if dtype != torch.float32:
        cos, sin = cos.to(dtype=dtype), sin.to(dtype=dtype)
    return cos, sin


def layer_cos_sin(
    inv_freq: torch.Tensor,
    factor: torch.Tensor | float,
    position_ids: torch.Tensor,
    attention_scaling: float,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of one layer: the base rotary computation with ``inv_freq / factor``.

    The operations match transformers' rotary forward exactly, so a uniform factor s equals transformers'
    native linear scaling with factor s bit for bit.
    """
    scaled = inv_freq.to(device=position_ids.device, dtype=torch.float) / factor
    return cos_sin(position_ids[..., None].float(), torch.cat((scaled, scaled)), attention_scaling, dtype)
