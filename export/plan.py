"""How an adapter's factors are written into a model folder: transformers' own RoPE settings where they can say
it, generated code where they cannot. Pure functions of the base RoPE settings and the factors.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rope_adapter.rope_settings import RopeParameters, RopeSettings, is_per_layer_type

NATIVE = "native"
CUSTOM_CODE = "custom-code"
LINEAR_BASES = ("default", "linear")


@dataclass(frozen=True)
class ExportPlan:
    """``format`` "native": the folder is the base architecture with ``rope_parameters`` replaced (linear scaling,
    per layer type for Gemma3-style models), loadable by any loader. "custom-code": a new model_type with the
    factors in config.json and generated code beside the weights. ``reason`` says why (shown to the user)."""

    format: Literal["native", "custom-code"]
    rope_parameters: RopeSettings | None  # native only: the new rope_parameters
    reason: str


def _nice(value: float) -> float:
    return round(value, 6) if math.isclose(value, round(value, 6)) else value


def linear_rope_parameters(params: RopeParameters, factor: float) -> RopeParameters | None:
    """``params`` with every position divided by ``factor`` more, as transformers' native linear scaling.

    None when the base RoPE type is neither default nor linear (YaRN, llama3, dynamic, ...): dividing their
    inv_freq is not any native setting.
    """
    if factor == 1.0:
        return copy.deepcopy(params)
    rope_type = params.get("rope_type", "default")
    if rope_type not in LINEAR_BASES:
        return None
    previous = float(params.get("factor", 1.0)) if rope_type == "linear" else 1.0
    return {**copy.deepcopy(params), "rope_type": "linear", "factor": _nice(previous * float(factor))}


def plan_export(
    rope_parameters: RopeSettings, layer_types: Sequence[str] | None, factors: Sequence[float]
) -> ExportPlan:
    """Choose the folder format for ``factors`` on a model with ``rope_parameters``.

    ``layer_types`` is the per-layer rotary type when the model keeps one rotary per layer type (Gemma3), else
    None. Native when every rotary that the model computes gets one factor: all factors equal on a
    default/linear-RoPE model, or factors constant per layer type on a per-type model whose types are
    default/linear RoPE. Otherwise custom code.
    """
    factors = [float(f) for f in factors]
    if layer_types is None:
        if is_per_layer_type(rope_parameters):
            return ExportPlan(CUSTOM_CODE, None, "per-layer-type rope_parameters without per-type rotary")
        if len(set(factors)) > 1:
            return ExportPlan(CUSTOM_CODE, None, "the factors differ between layers")
        native = linear_rope_parameters(rope_parameters, factors[0])
        if native is None:
            return ExportPlan(
                CUSTOM_CODE, None, f"uniform factor on {rope_parameters.get('rope_type')!r} RoPE has no native form"
            )
        return ExportPlan(NATIVE, native, "one factor for all layers: native linear scaling")
    per_type: dict[str, set[float]] = {}
    for layer_type, factor in zip(layer_types, factors, strict=True):
        per_type.setdefault(layer_type, set()).add(factor)
    varying = sorted(t for t, values in per_type.items() if len(values) > 1)
    if varying:
        return ExportPlan(CUSTOM_CODE, None, f"the factors differ within layer type {', '.join(varying)}")
    native = copy.deepcopy(rope_parameters)
    for layer_type, (factor,) in per_type.items():
        scaled = linear_rope_parameters(rope_parameters[layer_type], factor)
        if scaled is None:
            return ExportPlan(
                CUSTOM_CODE,
                None,
                f"layer type {layer_type} uses {rope_parameters[layer_type].get('rope_type')!r} RoPE, which has no "
                f"native scaled form",
            )
        native[layer_type] = scaled
    return ExportPlan(NATIVE, native, "one factor per layer type: native linear scaling per layer type")
