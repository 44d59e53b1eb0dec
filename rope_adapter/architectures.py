"""Where RoPE lives in a transformers decoder, found from the module tree instead of per-model tables.

Every supported model owns one rotary module (``rotary_emb``) beside a ``layers`` ModuleList of decoder layers,
runs the rotary module once per forward and hands its ``(cos, sin)`` to each layer as ``position_embeddings=``.
Models with per-layer-type rotary (Gemma3) call it once per layer type with ``layer_type``.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .errors import UnsupportedModelError
from .factors import LAYOUTS, cos_sin, double_inv_freq
from .rope_settings import RopeSettings

# Architectures covered by the test suite; any other decoder with the same structure works too.
TESTED_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "gpt_neox",
)


@dataclass
class RopeSite:
    """The parts of a model that layer-specific scaling touches."""

    backbone: nn.Module  # the module that owns `rotary_emb` and `layers`
    backbone_name: str  # e.g. "model" or "gpt_neox"
    rotary_name: str  # e.g. "model.rotary_emb"
    rotary: nn.Module
    layers: nn.ModuleList
    layer_types: list[str] | None  # per-layer rotary type (Gemma3), else None
    model_type: str
    rope_parameters: RopeSettings  # the text config's rope_parameters ({} without any)
    rotary_dim: int  # number of rotated channels per head (partial rotary: less than head_dim)
    layout: str = "half"  # channel layout of the rotary's (cos, sin): "half" (cat) or "interleaved" (Cohere)

    @property
    def num_layers(self) -> int:
        return len(self.layers)


def _unsupported(model: nn.Module, why: str) -> UnsupportedModelError:
    model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
    return UnsupportedModelError(
        f"{type(model).__name__} (model_type {model_type!r}) cannot take layer-specific RoPE scaling: {why}. "
        f"Supported: decoders that own a `rotary_emb` module and pass `position_embeddings` to their layers, "
        f"tested on {', '.join(TESTED_MODEL_TYPES)}."
    )


def _unwrap_rotary(module: nn.Module) -> nn.Module:
    while hasattr(module, "base_layer"):
        module = module.base_layer
    return module


def find_rope_site(model: nn.Module) -> RopeSite:
    """Locate the rotary module and the decoder layers of ``model`` or raise UnsupportedModelError."""
    found = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(getattr(module, "rotary_emb", None), nn.Module)
        and isinstance(getattr(module, "layers", None), nn.ModuleList)
    ]
    if not found:
        if not any("rotary" in name for name, _ in model.named_modules()):
            raise _unsupported(model, "it has no rotary position embedding")
        raise _unsupported(model, "no module holds both a `rotary_emb` and a `layers` list")
    if len(found) > 1:
        raise _unsupported(model, f"it has several rotary backbones ({', '.join(n for n, _ in found)})")
    name, backbone = found[0]
    rotary = _unwrap_rotary(backbone.rotary_emb)
    inside = {id(m) for m in backbone.rotary_emb.modules()}
    others = [
        n
        for n, m in model.named_modules()
        if id(m) not in inside
        and (
            "rotary" in type(m).__name__.lower()
            or any(b.endswith("inv_freq") for b, _ in m.named_buffers(recurse=False))
        )
    ]
    if others:
        raise _unsupported(
            model,
            f"besides `{name + '.' if name else ''}rotary_emb` it has other rotary modules ({', '.join(others[:3])}), "
            f"which an adapter on `rotary_emb` would not reach",
        )
    layers = backbone.layers
    if len(layers) == 0:
        raise _unsupported(model, "it has no decoder layers")
    params = inspect.signature(type(layers[0]).forward).parameters
    if "position_embeddings" not in params:
        raise _unsupported(model, f"its decoder layer {type(layers[0]).__name__} does not take `position_embeddings`")
    if not hasattr(rotary, "inv_freq") and not any(n.endswith("_inv_freq") for n, _ in rotary.named_buffers()):
        raise _unsupported(model, f"its rotary module {type(rotary).__name__} has no `inv_freq`")

    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text_config, "lrs_factors", None) is not None:
        raise UnsupportedModelError(
            f"this {type(model).__name__} already applies per-layer RoPE factors (a folder written by "
            f"`rope-adapter export`); stacking another LRS adapter would hide them: apply the adapter to the base "
            f"model instead (`rope-adapter info` shows which one)"
        )
    layer_types = None
    if "layer_type" in inspect.signature(type(rotary).forward).parameters:
        layer_types = list(text_config.layer_types)
        if len(layer_types) != len(layers):
            raise _unsupported(model, "config.layer_types does not match the number of layers")
        first = layer_types[0]
        rotary_dim = 2 * getattr(rotary, f"{first}_inv_freq").numel()
    else:
        rotary_dim = 2 * rotary.inv_freq.numel()
    rope_parameters = dict(getattr(text_config, "rope_parameters", None) or {})
    layout = detect_layout(model, rotary, layer_types)
    return RopeSite(
        backbone=backbone,
        backbone_name=name,
        rotary_name=f"{name}.rotary_emb" if name else "rotary_emb",
        rotary=rotary,
        layers=layers,
        layer_types=layer_types,
        model_type=str(getattr(text_config, "model_type", type(model).__name__)),
        rope_parameters=rope_parameters,
        rotary_dim=rotary_dim,
        layout=layout,
    )


def _probe_output(twin: nn.Module, layer_type: str | None, positions: torch.Tensor) -> Any:
    x = torch.zeros(1, positions.shape[-1], 1)
    with torch.no_grad():
        return twin(x, positions) if layer_type is None else twin(x, positions, layer_type)


def detect_layout(model: nn.Module, rotary: nn.Module, layer_types: list[str] | None = None) -> str:
    """The channel layout ("half" or "interleaved") in which ``rotary`` returns ``(cos, sin)``, found by running
    a CPU copy of it on a few positions with known frequencies and comparing its output bit for bit with each
    layout's. Raises UnsupportedModelError when no layout reproduces it (then no per-layer factor can be exact).
    """
    twin = copy.deepcopy(rotary)
    if any(b.is_meta for b in twin.buffers()):
        twin = twin.to_empty(device="cpu")
    else:
        twin = twin.to("cpu")
    types = sorted(set(layer_types)) if layer_types else [None]
    positions = torch.arange(9)[None]
    for layer_type in types:
        prefix = f"{layer_type}_" if layer_type else ""
        inv_freq = getattr(twin, f"{prefix}inv_freq")
        known = 1.0 / (1.7 ** torch.arange(inv_freq.numel(), dtype=torch.float32))
        with torch.no_grad():
            for name, buf in twin.named_buffers():
                if name.endswith("inv_freq") and buf.shape == inv_freq.shape:
                    buf.copy_(known)
        known = getattr(twin, f"{prefix}inv_freq").float()  # as the buffer holds it (bfloat16 after a cast)
        try:
            out = _probe_output(twin, layer_type, positions)
        except Exception as exc:
            raise _unsupported(model, f"its rotary module {type(rotary).__name__} fails on a probe ({exc})") from exc
        scaling = float(getattr(twin, f"{prefix}attention_scaling", 1.0))
        found = None
        if isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out):
            for layout in LAYOUTS:
                want = cos_sin(positions[..., None].float(), double_inv_freq(known, layout), scaling, out[0].dtype)
                if all(w.shape == o.shape and torch.equal(w, o) for w, o in zip(want, out, strict=True)):
                    found = layout
                    break
        if found is None:
            raise _unsupported(
                model,
                f"its rotary module {type(rotary).__name__} does not return (cos, sin) in a known channel layout "
                f"({' or '.join(LAYOUTS)}), so per-layer factors could not reproduce it exactly",
            )
        if layer_type == types[0]:
            layout = found
        elif found != layout:
            raise _unsupported(model, "its per-layer-type rotary modules use different channel layouts")
    return layout


def rope_state(rotary: nn.Module, layer_type: str | None) -> tuple[torch.Tensor, float]:
    """The rotary module's current ``inv_freq`` and ``attention_scaling`` (after any dynamic update)."""
    prefix = f"{layer_type}_" if layer_type else ""
    return getattr(rotary, f"{prefix}inv_freq"), float(getattr(rotary, f"{prefix}attention_scaling", 1.0))
