"""Checks of a local base model folder's weight files, before an export loads them."""

from __future__ import annotations

from pathlib import Path

from safetensors import safe_open

from .staging import ExportError


def check_weight_files(folder: Path) -> None:
    """:class:`ExportError` when a local base model folder has no weights, or a safetensors file whose header is
    damaged or does not cover its data (a truncated download), before any weights are loaded."""
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("pytorch_model*.bin"))
    if not weights:
        raise ExportError(
            f"the base model folder {folder} has no weights (model.safetensors or pytorch_model.bin): "
            "give the folder the model was saved to"
        )
    for path in weights:
        if path.suffix != ".safetensors":
            continue
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except Exception as exc:
            raise ExportError(
                f"{path} is damaged ({str(exc).strip() or type(exc).__name__}): a truncated or interrupted download? "
                "Fetch or save the model again"
            ) from None
