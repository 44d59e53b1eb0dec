"""The config half of an exported LRS model: a mixin that adds per-layer RoPE factors to a transformers config.

Everything below the marker line is copied verbatim into the ``configuration_<type>_lrs.py`` that
``rope-adapter export`` writes beside the weights, so it must not import anything (the generated file imports
the base config class from transformers) and must not use names from rope_adapter.
"""

from __future__ import annotations

# ---8<--- copied into generated configuration files; nothing above this line is copied

LRS_ROPE_TYPE = "lrs"


def _per_layer_type(rope: dict) -> bool:
    return bool(rope) and all(isinstance(value, dict) for value in rope.values())


def wrap_rope_parameters(rope: dict | None) -> dict | None:
    """``rope_parameters`` as written to config.json: ``{"rope_type": "lrs", "base": ...}`` (per layer type
    when the model has one rotary per layer type), a RoPE type no loader without this code knows."""
    if rope is None:
        return None
    if _per_layer_type(rope):
        return {name: wrap_rope_parameters(value) for name, value in rope.items()}
    return {"rope_type": LRS_ROPE_TYPE, "base": rope}


def unwrap_rope_parameters(rope: dict | None) -> dict | None:
    """The base model's ``rope_parameters`` from their config.json form (unchanged when not wrapped)."""
    if not isinstance(rope, dict):
        return rope
    if rope.get("rope_type") == LRS_ROPE_TYPE:
        return rope["base"]
    if _per_layer_type(rope):
        return {name: unwrap_rope_parameters(value) for name, value in rope.items()}
    return rope


class LrsConfigMixin:
    """Per-layer RoPE factors (layer-specific RoPE scaling, arXiv 2503.04355) on top of a base config.

    ``lrs_factors`` holds one factor per decoder layer: layer l rotates queries and keys with
    ``inv_freq / lrs_factors[l]``, where ``inv_freq`` and the attention scaling come from the base
    ``rope_parameters`` unchanged. ``lrs_base_model_type`` and ``lrs_provenance`` record where they come from.

    config.json stores ``rope_parameters`` wrapped as RoPE type "lrs" (see ``wrap_rope_parameters``): a loader
    that does not know this class, such as the base model class used directly, stops at the unknown RoPE type
    instead of running the model without the factors.
    """

    def __post_init__(self, **kwargs) -> None:
        self.rope_parameters = unwrap_rope_parameters(self.rope_parameters)
        for name in ("lrs_factors", "lrs_base_model_type", "lrs_provenance"):
            setattr(self, name, kwargs.pop(name, getattr(self, name, None)))
        super().__post_init__(**kwargs)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["rope_parameters"] = wrap_rope_parameters(out.get("rope_parameters"))
        return out

    def to_diff_dict(self) -> dict:
        out = super().to_diff_dict()
        out["rope_parameters"] = self.to_dict()["rope_parameters"]  # always written, so the guard stays
        return out
