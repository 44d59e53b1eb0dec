"""LrsConfig: the adapter's contract, everything needed to rebuild it (the numbers also live in safetensors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from peft.config import PeftConfig

from .errors import AdapterFileError, InvalidFactorsError
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
        if self.factors is not None:
            count = self.num_layers
            if count is None:
                count = 1 if isinstance(self.factors, int | float) else len(self.factors)
            if isinstance(self.factors, int | float) and self.num_layers is None:
                validate_factors([self.factors], 1)
                self.factors = float(self.factors)
            else:
                self.factors = validate_factors(self.factors, count)
        if self.provenance is not None and not isinstance(self.provenance, dict):
            raise AdapterFileError("adapter_config.json: provenance must be an object or null")

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
