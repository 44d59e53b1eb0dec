"""``lrs_export.json``, the record an export writes beside the model folder's own files
(:data:`~rope_adapter.export.reading.SIDECAR_NAME`): one typed definition that the export
(:func:`~rope_adapter.export.bake.export_model`) writes and every reader (the card, ``rope-adapter info``) reads."""

from __future__ import annotations

from typing import Literal, TypedDict

from rope_adapter.json_types import JsonObject
from rope_adapter.rope_settings import RopeSettings

from .serving import VllmNote


class Verification(TypedDict):
    """The export's check against the adapter (:func:`~rope_adapter.export.verify.verify_export`)."""

    max_abs_diff: float
    probe_tokens: int
    dtype: str


class _SidecarRequired(TypedDict):
    format: Literal["native", "custom-code"]
    reason: str
    rope_adapter_version: str
    base_model: str | None
    base_model_type: str | None
    adapter: str | None
    num_layers: int | None
    head_dim: int | None
    rotary_dim: int | None
    base_rope_parameters: RopeSettings
    factors: list[float]
    provenance: JsonObject | None
    verification: Verification | None  # None: written without verify


class ExportSidecar(_SidecarRequired, total=False):
    """``lrs_export.json`` of an exported folder (:data:`~rope_adapter.export.reading.SIDECAR_NAME`)."""

    vllm: VllmNote  # a native folder vLLM serves shorter than its full length
