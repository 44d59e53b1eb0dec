"""Reading a folder written by ``rope-adapter export`` (for ``rope-adapter info``), from its JSON files only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, TypedDict

import rope_adapter
from rope_adapter import LrsError
from rope_adapter.json_types import JsonObject
from rope_adapter.records import read_json
from rope_adapter.rope_settings import RopeSettings
from rope_adapter.standalone import unwrap_rope_parameters

from .plan import CUSTOM_CODE, NATIVE
from .sidecar import Verification
from .staging import ExportError

SIDECAR_NAME = "lrs_export.json"
"""Written into every exported folder: factors, base model, provenance and the verification result."""


class ExportedFactors(TypedDict):
    """What :func:`read_exported_factors` gives: the keys of ``rope-adapter info``'s adapter record
    (:class:`~rope_adapter.cli.info.AdapterInfo`) and the export's own (``format``, ``model_type``,
    ``verification``), each as the folder's files hold it."""

    kind: Literal["exported-model"]
    path: str
    format: Literal["native", "custom-code"]
    model_type: str | None
    base_model: str | None
    base_model_type: str | None
    num_layers: int
    head_dim: int | None
    base_rope_parameters: RopeSettings | None
    factors: list[float]
    provenance: JsonObject | None
    verification: Verification | None


def read_exported_factors(folder: str | os.PathLike) -> ExportedFactors:
    """Factors, base model and provenance of a folder written by :func:`export_model` (for ``rope-adapter info``).

    Reads only JSON files: config.json and the sidecar, each checked to be a JSON object (their keys are read one by
    one, as an older or a hand-edited folder holds them).
    """
    folder = Path(folder)
    config_file = folder / "config.json"
    try:
        config = read_json(config_file, JsonObject)
    except ValueError as exc:  # a RecordFileError naming the file
        raise ExportError(str(exc)) from exc
    sidecar_file = folder / SIDECAR_NAME
    sidecar: JsonObject = {}
    if sidecar_file.is_file():
        try:
            sidecar = read_json(sidecar_file, JsonObject)
        except ValueError as exc:  # a RecordFileError naming the file
            raise ExportError(str(exc)) from exc
    if "lrs_factors" in config:
        factors = config["lrs_factors"]
        if sidecar.get("factors") is not None and sidecar["factors"] != factors:
            raise ExportError(
                f"{config_file} and {SIDECAR_NAME} disagree on the factors: the folder was edited by hand "
                f"(the model uses config.json's lrs_factors)"
            )
        fmt = CUSTOM_CODE
        base_rope = unwrap_rope_parameters(config.get("rope_parameters"))
        base_type = config.get("lrs_base_model_type")
        provenance = config.get("lrs_provenance")
    elif sidecar.get("factors") is not None:
        factors = sidecar["factors"]
        fmt = NATIVE
        base_rope = sidecar.get("base_rope_parameters")
        base_type = sidecar.get("base_model_type") or config.get("model_type")
        provenance = sidecar.get("provenance")
    else:
        raise ExportError(
            f"{folder} is not a folder written by `rope-adapter export`: config.json has no lrs_factors and there "
            f"is no {SIDECAR_NAME}"
        )
    try:
        factors = rope_adapter.validate_factors(factors, len(factors))
    except (LrsError, TypeError) as exc:
        raise ExportError(f"{folder}: bad factors: {exc}") from exc
    head_dim = sidecar.get("head_dim") or config.get("head_dim")
    if head_dim is None and config.get("num_attention_heads"):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
    return {
        "kind": "exported-model",
        "path": str(folder),
        "format": fmt,
        "model_type": config.get("model_type"),
        "base_model": sidecar.get("base_model"),
        "base_model_type": base_type,
        "num_layers": len(factors),
        "head_dim": head_dim,
        "base_rope_parameters": base_rope,
        "factors": factors,
        "provenance": provenance,
        "verification": sidecar.get("verification"),
    }
