"""A model's RoPE settings as transformers keeps them (``config.rope_parameters``), and what an adapter depends on
in them.

One rotary's settings are transformers' own record, :class:`~transformers.modeling_rope_utils.RopeParameters`
(``rope_type``, ``rope_theta``, ``factor``, ...). A model with one rotary per layer type (Gemma3) keeps one of
them per layer type (``{"full_attention": {...}, "sliding_attention": {...}}``): :data:`RopeSettings` is either.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from transformers.modeling_rope_utils import RopeParameters

RopeSettings = RopeParameters | dict[str, RopeParameters]
"""``config.rope_parameters``: one rotary's settings, or one per layer type (Gemma3)."""

__all__ = ["RopeParameters", "RopeSettings", "copy_rope_settings", "is_per_layer_type", "rope_signature", "rotaries"]


def is_per_layer_type(params: Mapping[str, object] | None) -> bool:
    """True for settings kept per layer type (every value an object), as Gemma3's."""
    return bool(params) and all(isinstance(v, dict) for v in params.values())


def rotaries(params: RopeSettings | None) -> list[RopeParameters]:
    """Each rotary's settings: the per-layer-type ones, or ``params`` itself (none for empty settings)."""
    if not params:
        return []
    if is_per_layer_type(params):
        return list(params.values())
    return [params]


def copy_rope_settings(config: object) -> RopeSettings:
    """A deep copy of a (text) config's ``rope_parameters`` ({} when it has none)."""
    return copy.deepcopy(dict(getattr(config, "rope_parameters", None) or {}))


def rope_signature(params: RopeSettings | None) -> RopeSettings:
    """The parts of the settings an adapter depends on (the type and its numbers, per layer type where the model
    keeps them so), sorted, comparable across transformers versions: two adapters' settings mean the same RoPE
    exactly when their signatures are equal."""
    if not params:
        return {}
    if is_per_layer_type(params):
        return {k: rope_signature(v) for k, v in sorted(params.items())}
    return {k: v for k, v in sorted(params.items()) if k != "partial_rotary_factor"}
