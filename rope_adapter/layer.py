"""The tuner layer: wraps the model's rotary module and hands each decoder layer its own (cos, sin).

The wrapped rotary module runs as before (once per forward, per layer type) and its output reaches the decoder
layers carrying every layer's own pair (see :mod:`.tables` for how they are shared, batched and bounded in
memory). Each decoder layer's ``forward`` (:class:`LayerForward`; a forward pre-hook, :class:`LayerHook`, where
something else replaced it already) replaces ``position_embeddings`` with the layer's pair.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from peft.tuners._buffer_dict import BufferDict
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn

from .architectures import rope_state
from .tables import FactorPlan, LrsPositionEmbeddings, cached_plan, compiling, layer_tables


def tracked(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a normal tensor, whose in-place changes torch counts. An inference tensor (made under
    ``torch.inference_mode()``: a model built, loaded, cast or moved there) keeps no version counter, so the plan made
    from it could never be kept (every forward would read the factors on the host again, a device sync on a GPU, and
    rebuild it), and outside inference mode it refuses in-place changes (``set_factors``, ``load_state_dict``)."""
    with torch.inference_mode(False):
        return tensor.clone()


class Float32BufferDict(BufferDict):
    """A persistent BufferDict whose tensors stay float32 when the model is cast to bf16/fp16, and normal tensors
    when it is cast or moved under ``torch.inference_mode()`` (:func:`tracked`).

    ``model.to(torch.bfloat16)`` would turn a factor 1.3 into 1.2969; device moves still apply.
    """

    def __init__(self) -> None:
        super().__init__(persistent=True)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Float32BufferDict:
        saved = dict(self._buffers)
        super()._apply(fn, recurse)
        for key, old in saved.items():
            new = self._buffers[key]
            if new is not None and old is not None and new.dtype != torch.float32:
                self._buffers[key] = new = old.to(device=new.device, dtype=torch.float32)
            if new is not None and new.is_inference():
                self._buffers[key] = tracked(new)
        return self


class LayerForward:
    """Decoder layer ``layer_idx``'s ``forward`` with the layer's own ``position_embeddings``: set on the layer as its
    ``forward`` attribute, which torch's module call reaches on its fast path. A forward pre-hook would do the same
    job but sends every call of the layer through torch's hook path: measured on a 24-layer model whose decode step
    is bound by host time (as small models are on a GPU in eager PyTorch), 24 no-op pre-hooks alone cost 2.7 % of
    the step. Deepcopy and pickling keep working (the layer is found again through the copy's memo)."""

    def __init__(self, layer: nn.Module, layer_idx: int) -> None:
        self.layer = layer
        self.layer_idx = layer_idx

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pe = kwargs.get("position_embeddings")
        if isinstance(pe, LrsPositionEmbeddings):
            kwargs["position_embeddings"] = pe.for_layer(self.layer_idx)
        return type(self.layer).forward(self.layer, *args, **kwargs)


class LayerHook:
    """Forward pre-hook of decoder layer ``layer_idx``, for a layer whose ``forward`` something else replaced already
    (accelerate's device hooks, another library's wrapper): it works whatever the layer's ``forward`` is.
    Stateless, so deepcopy and pickling keep working."""

    def __init__(self, layer_idx: int) -> None:
        self.layer_idx = layer_idx

    def __call__(
        self, module: nn.Module, args: tuple, kwargs: dict[str, object]
    ) -> tuple[tuple, dict[str, object]] | None:
        """The layer's keyword arguments (torch's pre-hook ``with_kwargs``: whatever the decoder passes) with its own
        ``position_embeddings``; None (unchanged) when the model's are not LRS ones."""
        pe = kwargs.get("position_embeddings")
        if not isinstance(pe, LrsPositionEmbeddings):
            return None
        kwargs["position_embeddings"] = pe.for_layer(self.layer_idx)
        return args, kwargs


def _attached(layer: nn.Module) -> bool:
    return isinstance(layer.__dict__.get("forward"), LayerForward) or any(
        isinstance(h, LayerHook) for h in layer._forward_pre_hooks.values()
    )


def attach_layer(layer: nn.Module, layer_idx: int) -> None:
    """Make decoder layer ``layer_idx`` take its own ``(cos, sin)``: a :class:`LayerForward`, or a
    :class:`LayerHook` when the layer's ``forward`` is replaced already. Nothing when it takes them already."""
    if _attached(layer):
        return
    if "forward" in layer.__dict__:
        layer.register_forward_pre_hook(LayerHook(layer_idx), with_kwargs=True)
    else:
        layer.forward = LayerForward(layer, layer_idx)


def install_layer_hooks(layers: nn.ModuleList) -> None:
    """Give every decoder layer its own ``(cos, sin)`` (:func:`attach_layer`)."""
    for idx, layer in enumerate(layers):
        attach_layer(layer, idx)


def remove_layer_hooks(layers: nn.ModuleList) -> None:
    """Undo :func:`install_layer_hooks`: each layer's own ``forward`` back, our pre-hooks gone. A layer whose
    ``forward`` something else replaced after us keeps our :class:`LayerForward` inside it, which then passes
    every call through unchanged (no LRS ``position_embeddings`` reach it once the rotary is unwrapped)."""
    for layer in layers:
        if isinstance(layer.__dict__.get("forward"), LayerForward):
            del layer.__dict__["forward"]
        for key, hook in list(layer._forward_pre_hooks.items()):
            if isinstance(hook, LayerHook):
                del layer._forward_pre_hooks[key]
                layer._forward_pre_hooks_with_kwargs.pop(key, None)


def count_layer_hooks(model: nn.Module) -> int:
    """Number of decoder layers anywhere in ``model`` that take their own ``(cos, sin)`` from LRS (0 after
    unload/delete)."""
    return sum(_attached(module) for module in model.modules())


class LrsRotaryLayer(nn.Module, BaseTunerLayer):
    """Wraps a rotary embedding module; holds one float32 factor vector ``[num_layers]`` per adapter."""

    adapter_layer_names: tuple[str, ...] = ()
    other_param_names: tuple[str, ...] = ("lrs_factors",)

    def __init__(
        self,
        base_layer: nn.Module,
        adapter_name: str,
        factors: list[float],
        layout: str = "half",
        layer_types: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.layout = layout  # channel layout of the base rotary's (cos, sin), see factors.double_inv_freq
        self.layer_types = layer_types  # per-layer rotary type (Gemma3), else None
        self._lrs_plans: dict[str | None, FactorPlan] = {}  # per layer type; stale once the factors change
        self.lrs_factors = Float32BufferDict()
        self.merged_adapters = []
        self._disable_adapters = False
        self.update_layer(adapter_name, factors)
        self._active_adapter = adapter_name

    def update_layer(self, adapter_name: str, factors: list[float]) -> None:
        device = next(iter(self.base_layer.buffers()), torch.empty(0)).device
        with torch.inference_mode(False):  # a normal tensor even under inference mode, see tracked()
            self.lrs_factors[adapter_name] = torch.tensor(factors, dtype=torch.float32, device=device)

    def set_factors(self, adapter_name: str, factors: list[float]) -> None:
        """Swap an adapter's factors in place (no reallocation, no re-injection)."""
        self._factors(adapter_name).copy_(torch.tensor(factors, dtype=torch.float32))

    def _factors(self, adapter_name: str) -> torch.Tensor:
        """The adapter's factor tensor, made a normal tensor first if it is an inference tensor (see
        :func:`tracked`: a cast or device move under inference mode makes one)."""
        stored = self.lrs_factors._buffers  # runs every forward: the dict itself, not BufferDict's lookups
        factors = stored[adapter_name]
        if not compiling() and factors.is_inference():  # torch.compile cannot trace is_inference() (a graph break)
            factors = stored[adapter_name] = tracked(factors)
        return factors

    def _active_factors(self) -> torch.Tensor | None:
        if self.disable_adapters:
            return None
        stored = self.lrs_factors._buffers  # runs every forward: the dict itself, not BufferDict's lookups
        active = [name for name in self.active_adapters if name in stored]
        if not active:
            return None
        if len(active) > 1:
            raise ValueError(
                f"LRS applies one adapter at a time, but {active} are active: choose one with set_adapter(name)"
            )
        return self._factors(active[0])

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.base_layer(x, position_ids, *args, **kwargs)
        factors = self._active_factors()
        if factors is None:
            return out
        layer_type = kwargs.get("layer_type", args[0] if args else None)
        inv_freq, attention_scaling = rope_state(self.base_layer, layer_type)
        return layer_tables(
            out, position_ids, inv_freq, attention_scaling, self._plan(factors, layer_type), self.layout
        )

    def _plan(self, factors: torch.Tensor, layer_type: str | None) -> FactorPlan:
        """Which layers share which table: made once per factor tensor and in-place version (``set_factors``,
        ``load_state_dict``), adapter (``set_adapter``) and device (``model.to`` replaces the tensor)."""
        return cached_plan(self._lrs_plans, factors, self.layer_types, layer_type)

    def merge(self, safe_merge: bool = False, adapter_names: list[str] | None = None) -> None:
        raise NotImplementedError("LRS factors are merged by LrsModel.merge_and_unload(), not per layer")

    def unmerge(self) -> None:
        raise NotImplementedError("LRS factors are never merged into this layer")

    def __repr__(self) -> str:
        return f"lrs.{super().__repr__()}"
