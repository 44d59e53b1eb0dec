"""The tuner layer: wraps the model's rotary module and hands each decoder layer its own (cos, sin).

The wrapped rotary module runs as before (once per forward, per layer type) and its output reaches the decoder
layers tagged with what they need to rotate with their own factor. A forward pre-hook on each decoder layer
(:class:`LayerHook`) replaces ``position_embeddings`` with the layer's ``(cos, sin)``, computed when the layer runs
and released after it, so at no time is more than one extra table alive.
"""

from __future__ import annotations

from typing import Any

import torch
from peft.tuners._buffer_dict import BufferDict
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn

from .architectures import rope_state
from .factors import cos_sin, scaled_inv_freqs


class Float32BufferDict(BufferDict):
    """A persistent BufferDict whose tensors stay float32 when the model is cast to bf16/fp16.

    ``model.to(torch.bfloat16)`` would turn a factor 1.3 into 1.2969; device moves still apply.
    """

    def __init__(self) -> None:
        super().__init__(persistent=True)

    def _apply(self, fn, recurse: bool = True):  # noqa: ANN001
        saved = dict(self._buffers)
        super()._apply(fn, recurse)
        for key, old in saved.items():
            new = self._buffers[key]
            if new is not None and old is not None and new.dtype != torch.float32:
                self._buffers[key] = old.to(device=new.device, dtype=torch.float32)
        return self


class LrsPositionEmbeddings(tuple):
    """``(cos, sin)`` of the base rotary, tagged with what a layer needs to compute its own pair: the float
    positions and every layer's scaled frequencies ``inv_freq / s_l`` (``[num_layers, rotary_dim]``, a few KB)."""

    positions: torch.Tensor
    layer_inv_freqs: torch.Tensor
    attention_scaling: float

    def __new__(
        cls,
        base: tuple[torch.Tensor, torch.Tensor],
        positions: torch.Tensor,
        layer_inv_freqs: torch.Tensor,
        attention_scaling: float,
    ) -> LrsPositionEmbeddings:
        obj = super().__new__(cls, base)
        obj.positions = positions
        obj.layer_inv_freqs = layer_inv_freqs
        obj.attention_scaling = attention_scaling
        return obj


class LayerHook:
    """Forward pre-hook of decoder layer ``layer_idx``; stateless, so deepcopy and pickling keep working."""

    def __init__(self, layer_idx: int) -> None:
        self.layer_idx = layer_idx

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]):
        pe = kwargs.get("position_embeddings")
        if not isinstance(pe, LrsPositionEmbeddings):
            return None
        cos, sin = cos_sin(pe.positions, pe.layer_inv_freqs[self.layer_idx], pe.attention_scaling, pe[0].dtype)
        kwargs["position_embeddings"] = (cos, sin)
        return args, kwargs


def install_layer_hooks(layers: nn.ModuleList) -> None:
    for idx, layer in enumerate(layers):
        if not any(isinstance(h, LayerHook) for h in layer._forward_pre_hooks.values()):
            layer.register_forward_pre_hook(LayerHook(idx), with_kwargs=True)


def remove_layer_hooks(layers: nn.ModuleList) -> None:
    for layer in layers:
        for key, hook in list(layer._forward_pre_hooks.items()):
            if isinstance(hook, LayerHook):
                del layer._forward_pre_hooks[key]
                layer._forward_pre_hooks_with_kwargs.pop(key, None)


def count_layer_hooks(model: nn.Module) -> int:
    """Number of LRS hooks present anywhere in ``model`` (0 after unload/delete)."""
    return sum(isinstance(h, LayerHook) for module in model.modules() for h in module._forward_pre_hooks.values())


class LrsRotaryLayer(nn.Module, BaseTunerLayer):
    """Wraps a rotary embedding module; holds one float32 factor vector ``[num_layers]`` per adapter."""

    adapter_layer_names: tuple[str, ...] = ()
    other_param_names: tuple[str, ...] = ("lrs_factors",)

    def __init__(self, base_layer: nn.Module, adapter_name: str, factors: list[float], layout: str = "half") -> None:
        super().__init__()
        self.base_layer = base_layer
        self.layout = layout  # channel layout of the base rotary's (cos, sin), see factors.double_inv_freq
        self.lrs_factors = Float32BufferDict()
        self.merged_adapters = []
        self._disable_adapters = False
        self.update_layer(adapter_name, factors)
        self._active_adapter = adapter_name

    def update_layer(self, adapter_name: str, factors: list[float]) -> None:
        device = next(iter(self.base_layer.buffers()), torch.empty(0)).device
        self.lrs_factors[adapter_name] = torch.tensor(factors, dtype=torch.float32, device=device)

    def set_factors(self, adapter_name: str, factors: list[float]) -> None:
        """Swap an adapter's factors in place (no reallocation, no re-injection)."""
        buf = self.lrs_factors[adapter_name]
        buf.copy_(torch.tensor(factors, dtype=torch.float32))

    def _active_factors(self) -> torch.Tensor | None:
        if self.disable_adapters:
            return None
        active = [name for name in self.active_adapters if name in self.lrs_factors]
        if not active:
            return None
        if len(active) > 1:
            raise ValueError(
                f"LRS applies one adapter at a time, but {active} are active: choose one with set_adapter(name)"
            )
        return self.lrs_factors[active[0]]

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kwargs: Any):
        out = self.base_layer(x, position_ids, *args, **kwargs)
        factors = self._active_factors()
        if factors is None:
            return out
        layer_type = kwargs.get("layer_type", args[0] if args else None)
        inv_freq, attention_scaling = rope_state(self.base_layer, layer_type)
        positions = position_ids[..., None].float()
        layer_inv_freqs = scaled_inv_freqs(inv_freq, factors.to(positions.device), getattr(self, "layout", "half"))
        return LrsPositionEmbeddings(out, positions, layer_inv_freqs, attention_scaling)

    def merge(self, safe_merge: bool = False, adapter_names: list[str] | None = None) -> None:
        raise NotImplementedError("LRS factors are merged by LrsModel.merge_and_unload(), not per layer")

    def unmerge(self) -> None:
        raise NotImplementedError("LRS factors are never merged into this layer")

    def __repr__(self) -> str:
        return f"lrs.{super().__repr__()}"
