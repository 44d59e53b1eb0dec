"""Pure functions for per-layer RoPE scaling: validating factors and computing a layer's (cos, sin).

Layer l rotates queries and keys with ``inv_freq / s_l`` (position interpolation per layer), where ``inv_freq``
is the base model's current inverse frequency vector (after its own RoPE type, e.g. linear, dynamic, YaRN) and
its ``attention_scaling`` is kept. With every ``s_l = 1`` the result is the base model's bit for bit.

Two channel layouts of the rotary's ``(cos, sin)`` exist in transformers: ``"half"`` (``cat(freqs, freqs)``,
rotate-half models such as Llama) and ``"interleaved"`` (``repeat_interleave(freqs, 2)``, Cohere). The layout
only decides how the per-layer frequencies are doubled; everything else is the same.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .errors import AdapterFileError, InvalidFactorsError
from .numbers import as_int, as_real, is_scalar, items_of

FACTOR_MIN = 1e-3
FACTOR_MAX = 1e3
"""The range a factor must lie in: far beyond any useful scaling (1.0 is the base model), well inside float32."""

LAYOUTS = ("half", "interleaved")
"""Channel layouts of a rotary module's ``(cos, sin)``: ``cat(freqs, freqs)`` or ``repeat_interleave(freqs, 2)``."""

_RANGE_HINT = (
    f"factors must be finite and > 0, in [{FACTOR_MIN:g}, {FACTOR_MAX:g}]; 1.0 leaves a layer unchanged, "
    f"values above 1 interpolate positions (slower RoPE decay)"
)


def _layers(num_layers: Any) -> int:
    """The layer count validate_factors is given, in any whole-number type (checked once the factors are)."""
    return as_int(num_layers, "num_layers", error=InvalidFactorsError, low=0)


def validate_factors(factors: Any, num_layers: int) -> list[float]:
    """Return ``factors`` as a list of ``num_layers`` floats in ``[FACTOR_MIN, FACTOR_MAX]``, or raise
    InvalidFactorsError.

    A single number means the same factor for every layer. Any number type is taken (:mod:`rope_adapter.numbers`:
    int, float, numpy scalars and 0-d arrays, 0-d tensors, Fraction, Decimal), and any flat container of them
    (list, tuple, 1-D numpy array or torch tensor of any real dtype, float16 and bfloat16 included). Booleans,
    strings, nested lists and n-D arrays are refused.
    """
    if isinstance(factors, torch.Tensor | np.ndarray) and factors.ndim > 1:
        raise InvalidFactorsError(
            f"factors must be one number per layer (a flat list or 1-D tensor), got a {factors.dtype} "
            f"{type(factors).__name__} of shape {list(factors.shape)}"
        )
    if is_scalar(factors):
        try:
            one = as_real(factors, "factors", error=InvalidFactorsError, finite=False)
        except InvalidFactorsError as exc:
            raise InvalidFactorsError(f"factors must be a number or a list of numbers (one per layer): {exc}") from None
        items = [one] * _layers(num_layers)
    else:
        try:
            items = items_of(factors, "factors", InvalidFactorsError)
        except InvalidFactorsError:
            raise InvalidFactorsError(
                f"factors must be a number or a list of numbers (one per layer), got {factors!r:.80} "
                f"({type(factors).__name__})"
            ) from None
    values = []
    for index, item in enumerate(items):
        try:  # NaN and infinities pass here: the range check below names them with their layer
            values.append(as_real(item, f"factors[{index}]", error=InvalidFactorsError, finite=False))
        except InvalidFactorsError as exc:
            raise InvalidFactorsError(f"factors must be numbers (not booleans, strings or lists): {exc}") from None
    if len(values) != _layers(num_layers):
        raise InvalidFactorsError(
            f"got {len(values)} factors for a model with {num_layers} decoder layers: "
            f"give exactly one factor per layer (or a single number for all layers)"
        )
    bad = [(i, f) for i, f in enumerate(values) if not (math.isfinite(f) and FACTOR_MIN <= f <= FACTOR_MAX)]
    if bad:
        shown = ", ".join(f"layer {i}: {f}" for i, f in bad[:5])
        raise InvalidFactorsError(f"{_RANGE_HINT} ({shown})")
    return values


def check_factors_tensor(tensor: torch.Tensor, num_layers: int, where: str) -> None:
    """Check a stored factor tensor: float32, shape ``[num_layers]``, finite and in range."""
    if tensor.dtype != torch.float32:
        raise AdapterFileError(f"{where}: factors must be float32, found {tensor.dtype}")
    if tuple(tensor.shape) != (num_layers,):
        raise AdapterFileError(f"{where}: factors must have shape [{num_layers}], found {list(tensor.shape)}")
    in_range = torch.isfinite(tensor) & (tensor >= FACTOR_MIN) & (tensor <= FACTOR_MAX)
    if not bool(in_range.all()):
        raise AdapterFileError(f"{where}: {_RANGE_HINT}, found {tensor.tolist()}")


def double_inv_freq(inv_freq: torch.Tensor, layout: str = "half") -> torch.Tensor:
    """``inv_freq`` doubled along its last dimension the way the rotary module doubles its frequencies."""
    if layout == "half":
        return torch.cat((inv_freq, inv_freq), dim=-1)
    if layout == "interleaved":
        return torch.repeat_interleave(inv_freq, 2, dim=-1)
    raise ValueError(f"unknown rotary layout {layout!r}; known: {', '.join(LAYOUTS)}")


def cos_sin(
    positions: torch.Tensor, doubled_inv_freq: torch.Tensor, attention_scaling: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' rotary forward for float ``positions`` (``position_ids[..., None].float()``), bit for bit.

    ``doubled_inv_freq`` is ``inv_freq`` doubled like the rotary's channels (:func:`double_inv_freq`): multiplying
    by it equals transformers' ``cat(freqs, freqs)`` or ``repeat_interleave(freqs, 2)`` element for element, one
    operation fewer per layer. Multiplying by an attention scaling of exactly 1.0 and casting to float32 are
    identities, so they are skipped.
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
    layout: str = "half",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of one layer: the base rotary computation with ``inv_freq / factor``.

    The operations match transformers' rotary forward exactly, so a uniform factor s equals transformers'
    native linear scaling with factor s bit for bit.
    """
    scaled = inv_freq.to(device=position_ids.device, dtype=torch.float) / factor
    return cos_sin(position_ids[..., None].float(), double_inv_freq(scaled, layout), attention_scaling, dtype)
