"""The config half of an exported LRS model: a mixin that adds per-layer RoPE factors to a transformers config.

Everything below the marker line is copied verbatim into the ``configuration_<type>_lrs.py`` that
``rope-adapter export`` writes beside the weights, so it must not import anything (the generated file imports
the base config class from transformers) and must not use names from rope_adapter.
"""

from __future__ import annotations

# ---8<--- copied into generated configuration files; nothing above this line is copied

LRS_ROPE_TYPE = "lrs"
LRS_FACTOR_RANGE = (1e-3, 1e3)  # the range an LRS adapter accepts (FACTOR_MIN, FACTOR_MAX of its core)
LRS_LAYOUTS = ("half", "interleaved")  # channel layouts of the rotary's (cos, sin): cat or repeat_interleave


def check_lrs_fields(factors: object, layout: object) -> None:
    """Refuse factors that are not a list of finite numbers in LRS_FACTOR_RANGE, or an unknown layout."""
    low, high = LRS_FACTOR_RANGE
    if factors is not None:
        if not isinstance(factors, (list, tuple)) or not factors:
            raise ValueError(f"config.json: lrs_factors must be a non-empty list of numbers, found {factors!r}")
        for i, f in enumerate(factors):
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not low <= f <= high:  # NaN fails too
                raise ValueError(
                    f"config.json: lrs_factors[{i}] is {f!r}; factors must be numbers in [{low:g}, {high:g}] "
                    f"(1.0 leaves a layer unchanged): the folder was edited by hand, export it again"
                )
    if layout not in LRS_LAYOUTS:
        raise ValueError(f"config.json: lrs_rotary_layout must be one of {LRS_LAYOUTS}, found {layout!r}")


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
    ``rope_parameters`` unchanged. ``lrs_base_model_type`` and ``lrs_provenance`` record where they come from;
    ``lrs_rotary_layout`` is the channel layout of the base rotary's (cos, sin) ("half" unless "interleaved").
    Factors outside LRS_FACTOR_RANGE, NaN or not numbers are refused when the config is made.

    config.json stores ``rope_parameters`` wrapped as RoPE type "lrs" (see ``wrap_rope_parameters``): a loader
    that does not know this class, such as the base model class used directly, stops at the unknown RoPE type
    instead of running the model without the factors.
    """

    def __post_init__(self, **kwargs: object) -> None:
        self.rope_parameters = unwrap_rope_parameters(self.rope_parameters)
        for name in ("lrs_factors", "lrs_base_model_type", "lrs_provenance"):
            setattr(self, name, kwargs.pop(name, getattr(self, name, None)))
        self.lrs_rotary_layout = kwargs.pop("lrs_rotary_layout", getattr(self, "lrs_rotary_layout", None) or "half")
        check_lrs_fields(self.lrs_factors, self.lrs_rotary_layout)
        super().__post_init__(**kwargs)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["rope_parameters"] = wrap_rope_parameters(out.get("rope_parameters"))
        return out

    def to_diff_dict(self) -> dict:
        out = super().to_diff_dict()
        out["rope_parameters"] = self.to_dict()["rope_parameters"]  # always written, so the guard stays
        return out
