"""The model half of an exported LRS model: per-layer rotary for a transformers causal LM, in torch only.

Everything below the marker line is copied verbatim into the ``modeling_<type>_lrs.py`` that
``rope-adapter export`` writes beside the weights. It may use only ``torch`` and ``nn`` (imported by the
generated file) and nothing from rope_adapter. It repeats the adapter's mechanism (rope_adapter/layer.py and
rope_adapter/factors.py) operation for operation, so an exported model gives the adapter's logits exactly.
"""

from __future__ import annotations

import torch
from torch import nn

# ---8<--- copied into generated modeling files; nothing above this line is copied


class LrsFactors(nn.Module):
    """The per-layer factors as a float32 buffer. Not in the state dict: they come from ``config.lrs_factors``."""

    def __init__(self, factors: list[float]) -> None:
        super().__init__()
        self.register_buffer("factors", torch.tensor(factors, dtype=torch.float32), persistent=False)

    def _apply(self, fn: object, recurse: bool = True) -> nn.Module:
        # follow device moves, but stay float32 when the model is cast (bfloat16 would turn 1.3 into 1.2969)
        before = self.factors
        super()._apply(fn, recurse)
        if self.factors.dtype != torch.float32:
            self.factors = before.to(device=self.factors.device)
        return self


class RotaryOutput(tuple):
    """The model rotary's ``(cos, sin)``, tagged with what a decoder layer needs to compute its own pair."""


def tag_rotary_output(rotary: nn.Module, args: tuple, kwargs: dict, output: tuple) -> RotaryOutput:
    """Forward hook of the model's rotary module: remember its inv_freq, attention scaling and positions."""
    position_ids = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
    layer_type = kwargs.get("layer_type", args[2] if len(args) > 2 else None)  # per-layer-type rotary (Gemma3)
    prefix = f"{layer_type}_" if layer_type else ""
    tagged = RotaryOutput(output)
    tagged.inv_freq = getattr(rotary, f"{prefix}inv_freq")
    tagged.attention_scaling = float(getattr(rotary, f"{prefix}attention_scaling", 1.0))
    tagged.position_ids = position_ids
    return tagged


LRS_TABLE_BUDGET = {"cpu": 1 << 18, "other": 1 << 24}  # most values (layers x batch x tokens x channels) a forward
# computes in one batch; beyond it each layer computes its own pair (the bounds of the adapter's own tables)


def rotary_pairs(freqs: torch.Tensor, base: RotaryOutput, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' rotary forward from ``freqs`` (positions x scaled inv_freq) on: double, cos, sin, scale, cast."""
    if layout == "interleaved":
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * base.attention_scaling
    sin = emb.sin() * base.attention_scaling
    return cos.to(dtype=base[0].dtype), sin.to(dtype=base[0].dtype)


class TagRotary:
    """Forward hook of the model's rotary module: tags its output (:func:`tag_rotary_output`) and, within the
    budget, adds every layer's own pair computed in one batch (the same operations, element for element)."""

    def __init__(self, factors: LrsFactors, layout: str = "half") -> None:
        self.factors = factors  # the model's LrsFactors module
        self.layout = layout

    def __call__(self, rotary: nn.Module, args: tuple, kwargs: dict, output: tuple) -> RotaryOutput:
        tagged = tag_rotary_output(rotary, args, kwargs, output)
        positions = tagged.position_ids[..., None].float()
        inv_freq = tagged.inv_freq.to(device=positions.device, dtype=torch.float)
        factors = self.factors.factors.to(inv_freq.device)
        budget = LRS_TABLE_BUDGET["cpu" if positions.device.type == "cpu" else "other"]
        tagged.pairs = None
        if factors.numel() * positions.numel() * 2 * inv_freq.numel() <= budget:
            freqs = positions[None] * (inv_freq[None, :] / factors[:, None])[:, None, None, :]
            cos, sin = rotary_pairs(freqs, tagged, self.layout)
            tagged.pairs = list(zip(cos.unbind(0), sin.unbind(0), strict=True))
        return tagged


class LayerRotary:
    """Decoder layer ``layer_idx``'s pair in place of ``position_embeddings`` (called by :class:`LayerForward`, or as a
    forward pre-hook where another library replaced the layer's ``forward`` already)."""

    def __init__(self, layer_idx: int, factors: LrsFactors, layout: str = "half") -> None:
        self.layer_idx = layer_idx
        self.factors = factors  # the model's LrsFactors module
        self.layout = layout  # "half": cat(freqs, freqs); "interleaved": repeat_interleave(freqs, 2) (Cohere)

    def __call__(self, layer: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        base = kwargs.get("position_embeddings")
        if not isinstance(base, RotaryOutput):
            if isinstance(base, tuple) and type(base) is not tuple:
                raise RuntimeError(
                    "another per-layer RoPE mechanism (an LRS adapter?) re-tagged this model's rotary output; it "
                    "would replace the exported factors: apply it to the base model instead"
                )
            return None
        if getattr(base, "pairs", None) is not None:
            kwargs["position_embeddings"] = base.pairs[self.layer_idx]
            return args, kwargs
        position_ids = base.position_ids
        inv_freq = base.inv_freq.to(device=position_ids.device, dtype=torch.float)
        inv_freq = inv_freq / self.factors.factors[self.layer_idx].to(inv_freq.device)
        freqs = position_ids[..., None].float() * inv_freq
        kwargs["position_embeddings"] = rotary_pairs(freqs, base, getattr(self, "layout", "half"))
        return args, kwargs


class LayerForward:
    """A decoder layer's ``forward`` with :class:`LayerRotary`'s pair, set as its ``forward`` attribute: torch's fast
    path (a pre-hook takes the slower hook path on every call). Deepcopy and pickling find the layer via the memo."""

    def __init__(self, layer: nn.Module, rotary: LayerRotary) -> None:
        self.layer = layer
        self.rotary = rotary

    def __call__(self, *args: object, **kwargs: object) -> object:
        args, kwargs = self.rotary(self.layer, args, kwargs) or (args, kwargs)
        return type(self.layer).forward(self.layer, *args, **kwargs)


class LrsForCausalLMMixin:
    """Layer-specific RoPE scaling on a transformers causal LM: layer l rotates with ``inv_freq / factors[l]``."""

    def __init__(self, config: object, *args: object, **kwargs: object) -> None:
        super().__init__(config, *args, **kwargs)
        backbone = self.base_model
        factors = config.lrs_factors
        if factors is None or len(factors) != len(backbone.layers):
            raise ValueError(
                f"config.lrs_factors must hold one factor per decoder layer ({len(backbone.layers)}), found {factors!r}"
            )
        self.lrs = LrsFactors(factors)
        layout = getattr(config, "lrs_rotary_layout", None) or "half"
        backbone.rotary_emb.register_forward_hook(TagRotary(self.lrs, layout), with_kwargs=True)
        for idx, layer in enumerate(backbone.layers):
            rotary = LayerRotary(idx, self.lrs, layout)
            if "forward" in layer.__dict__:  # another library replaced it already: leave it, take the hook path
                layer.register_forward_pre_hook(rotary, with_kwargs=True)
            else:
                layer.forward = LayerForward(layer, rotary)

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LrsFactors):  # from_pretrained builds the model on "meta" first
            with torch.no_grad():
                module.factors.copy_(torch.tensor(self.config.lrs_factors, dtype=torch.float32))
