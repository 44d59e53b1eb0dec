"""LrsConfig: the adapter's contract, everything needed to rebuild it (the numbers also live in safetensors)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peft.config import PeftConfig

from .errors import AdapterFileError, InvalidFactorsError, LrsError
from .factors import validate_factors
from .registration import LRS_PEFT_TYPE


@dataclass
class LrsConfig(PeftConfig):
    """Configuration of a Layer-specific RoPE Scaling (LRS) adapter (arXiv 2503.04355).

    Layer ``l`` rotates queries and keys with ``inv_freq / factors[l]``. The adapter holds no trainable
    parameter; its factors are stored as a float32 tensor in ``adapter_model.safetensors`` and, for reading
    without torch, in ``adapter_config.json``.
    """

    factors: list[float] | float | None = field(
        default=None,
        metadata={
            "help": "One RoPE scaling factor per decoder layer (> 0; 1.0 leaves a layer unchanged). A single number "
            "applies to every layer; None means all ones (the base model), e.g. as a start for a search."
        },
    )
    num_layers: int | None = field(
        default=None,
        metadata={"help": "Decoder layer count of the base model; filled in when the adapter is made."},
    )
    head_dim: int | None = field(
        default=None,
        metadata={"help": "Attention head size of the base model; filled in when the adapter is made."},
    )
    rotary_dim: int | None = field(
        default=None,
        metadata={"help": "Rotated channels per head (< head_dim for partial rotary); filled in."},
    )
    base_model_type: str | None = field(
        default=None, metadata={"help": "model_type of the base model (e.g. 'llama'); filled in."}
    )
    base_rope_parameters: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "The base model's rope_parameters the factors were made for; filled in."},
    )
    provenance: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "How the factors were found: curve, control points, search study, task, scores."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.peft_type = LRS_PEFT_TYPE
        for name in ("num_layers", "head_dim", "rotary_dim"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise AdapterFileError(f"adapter_config.json: {name} must be a positive integer, found {value!r}")
        if self.base_model_type is not None and not isinstance(self.base_model_type, str):
            raise AdapterFileError(
                f"adapter_config.json: base_model_type must be a string, found {self.base_model_type!r}"
            )
        if self.base_rope_parameters is not None and not isinstance(self.base_rope_parameters, dict):
            raise AdapterFileError(
                f"adapter_config.json: base_rope_parameters must be an object (the base model's rope_parameters) or "
                f"null, found {type(self.base_rope_parameters).__name__} {self.base_rope_parameters!r}"
            )
        if self.factors is not None:
            if self.num_layers is None and (
                isinstance(self.factors, int | float) and not isinstance(self.factors, bool)
            ):
                self.factors = validate_factors([self.factors], 1)[0]
            elif self.num_layers is None:
                self.factors = validate_factors(self.factors, _count(self.factors))
            else:
                try:
                    self.factors = validate_factors(self.factors, self.num_layers)
                except InvalidFactorsError as exc:
                    if _count(self.factors) in (None, self.num_layers):
                        raise
                    raise AdapterFileError(
                        f"adapter_config.json: num_layers is {self.num_layers} but it lists {_count(self.factors)} "
                        f"factors: the file was edited by hand; re-save the adapter with save_pretrained()"
                    ) from exc
        check_provenance(self.provenance)

    def save_pretrained(self, save_directory: str, **kwargs: Any) -> None:
        """Write adapter_config.json atomically: checked first, then a temporary file renamed over the old one,
        so a failure leaves the previous file intact."""
        check_provenance(self.provenance)
        folder = Path(save_directory)
        if folder.is_file():
            raise AdapterFileError(f"{folder} is a file: save_pretrained needs a folder")
        folder.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=".adapter_config.", dir=folder))
        try:
            super().save_pretrained(str(staged), **kwargs)  # PEFT writes staged/adapter_config.json
            os.replace(staged / "adapter_config.json", folder / "adapter_config.json")
        finally:
            for item in staged.iterdir():
                item.unlink()
            staged.rmdir()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str, subfolder: str | None = None, **kwargs: Any):
        """PEFT's loader, after checking a local adapter folder completely (config, safetensors, and that they
        agree), so that ``PeftModel.from_pretrained`` and ``load_adapter`` refuse a bad folder before they change
        the model."""
        folder = Path(pretrained_model_name_or_path, subfolder) if subfolder else Path(pretrained_model_name_or_path)
        if folder.is_dir():
            from .api import check_adapter_folder

            check_adapter_folder(folder)
        return super().from_pretrained(pretrained_model_name_or_path, subfolder=subfolder, **kwargs)

    @property
    def resolved(self) -> bool:
        """True once the config has been bound to a model (layer count and factors list known)."""
        return self.num_layers is not None and isinstance(self.factors, list)


def check_resolved(config: LrsConfig, where: str) -> list[float]:
    """Factors of a config read from disk, which must be complete."""
    if not config.resolved:
        raise AdapterFileError(f"{where}: adapter_config.json lacks 'factors' or 'num_layers'")
    try:
        return validate_factors(config.factors, config.num_layers)  # type: ignore[arg-type]
    except InvalidFactorsError as exc:
        raise AdapterFileError(f"{where}: {exc}") from exc


def _count(factors: Any) -> int | None:
    try:
        return len(factors)
    except TypeError:
        return None


def check_provenance(provenance: Any) -> None:
    """Provenance must be a JSON object (or None): it is written into adapter_config.json."""
    if provenance is None:
        return
    if not isinstance(provenance, dict):
        raise AdapterFileError(f"provenance must be a JSON object or None, found {type(provenance).__name__}")
    try:
        json.dumps(provenance)
    except (TypeError, ValueError) as exc:
        raise LrsError(
            f"provenance must hold only JSON values (str, number, bool, None, list, dict with str keys): {exc}; "
            f"convert it first, e.g. a datetime with .isoformat()"
        ) from exc
