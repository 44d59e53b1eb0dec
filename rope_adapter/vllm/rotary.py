"""Per-layer factors on a vLLM model: each decoder layer's rotary embedding becomes a copy with ``inv_freq /
factor``. Plain torch on vLLM's rotary objects (``_compute_inv_freq``, ``_compute_cos_sin_cache`` and the
``cos_sin_cache`` buffer); nothing here imports vLLM.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

import torch
from torch import nn

from .served import VllmServingError

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@cache
def _scaled_class(base: type[nn.Module]) -> type[nn.Module]:
    """``base`` with its inverse frequencies divided by ``self.lrs_factor``: every cache it computes (the base
    RoPE type's own ``_compute_cos_sin_cache``, attention scaling included) then rotates ``factor`` times slower,
    which is what the adapter does to layer l (meaning A: the type's current ``inv_freq`` divided, its attention
    scaling kept)."""

    def _compute_inv_freq(self: nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
        return base._compute_inv_freq(self, *args, **kwargs) / self.lrs_factor

    return type(f"Lrs{base.__name__}", (base,), {"_compute_inv_freq": _compute_inv_freq, "__module__": __name__})


def scaled_rotary(rotary: nn.Module, factor: float) -> nn.Module:
    """A copy of vLLM rotary embedding ``rotary`` whose positions turn ``factor`` times slower (1.0: unchanged)."""
    scaled = copy.deepcopy(rotary)
    scaled.__class__ = _scaled_class(type(rotary))
    scaled.lrs_factor = torch.tensor(factor, dtype=torch.float32).item()  # the float32 value the adapter uses
    with torch.device(rotary.cos_sin_cache.device):
        cache_ = scaled._compute_cos_sin_cache()
    scaled.cos_sin_cache = cache_.to(dtype=rotary.cos_sin_cache.dtype, device=rotary.cos_sin_cache.device)
    return scaled


def layer_rotaries(model: nn.Module) -> dict[int, list[tuple[nn.Module, nn.Module]]]:
    """``{layer index: [(owner module, its rotary_emb), ...]}`` for every rotary embedding inside a decoder layer."""
    found: dict[int, list[tuple[nn.Module, nn.Module]]] = {}
    for name, module in model.named_modules():
        rotary = getattr(module, "rotary_emb", None)
        if isinstance(rotary, nn.Module) and (match := _LAYER.search(name + ".")):
            found.setdefault(int(match.group(1)), []).append((module, rotary))
    return found


def apply_layer_factors(model: nn.Module, factors: Sequence[float], num_layers: int, model_type: str) -> None:
    """Give decoder layer l of vLLM model ``model`` the rotary ``inv_freq / factors[l]``.

    Refuses (VllmServingError, one line) a model whose decoder layers do not each own exactly one rotary embedding
    with a ``cos_sin_cache``, or whose layer count differs from the number of factors. Layers that pipeline
    parallelism places elsewhere are absent here and left to their own process."""
    rotaries = layer_rotaries(model)
    if len(factors) != num_layers:
        raise VllmServingError(
            f"config.json of this {model_type} folder holds {len(factors)} lrs_factors for {num_layers} decoder "
            f"layers: the folder was edited by hand, export it again"
        )
    if not rotaries:
        raise VllmServingError(
            f"rope-adapter cannot serve {model_type}: vLLM's {type(model).__name__} has no rotary embedding inside "
            f"its decoder layers to scale"
        )
    for idx, owners in sorted(rotaries.items()):
        if len(owners) != 1 or not isinstance(getattr(owners[0][1], "cos_sin_cache", None), torch.Tensor):
            raise VllmServingError(
                f"rope-adapter cannot serve {model_type}: decoder layer {idx} of vLLM's {type(model).__name__} "
                f"holds {len(owners)} rotary embeddings, not one with a cos_sin_cache"
            )
        if not 0 <= idx < len(factors):
            raise VllmServingError(
                f"rope-adapter cannot serve {model_type}: vLLM's {type(model).__name__} has decoder layer {idx}, "
                f"but config.json holds {len(factors)} lrs_factors"
            )
    made: dict[tuple[int, float], nn.Module] = {}  # layers with the same rotary and factor share one copy
    for idx, [(owner, rotary)] in sorted(rotaries.items()):
        key = (id(rotary), float(factors[idx]))
        if key not in made:
            made[key] = scaled_rotary(rotary, float(factors[idx]))
        owner.rotary_emb = made[key]
