"""Errors raised by rope_adapter. Each one says what was wrong and what to do about it."""

from __future__ import annotations


class LrsError(ValueError):
    """Base class of every error rope_adapter raises on bad input."""


class InvalidFactorsError(LrsError):
    """Factors that cannot be used: wrong count, NaN, infinite, zero or negative."""


class UnsupportedModelError(LrsError):
    """A model without RoPE, or whose decoder layers do not take `position_embeddings`."""


class AdapterMismatchError(LrsError):
    """An adapter made for another base model (layer count, head size, RoPE type)."""


class AdapterFileError(LrsError):
    """A corrupt or hand-edited adapter_config.json or adapter_model.safetensors."""


class AdapterNameError(LrsError):
    """An adapter name that the model does not hold (never added, deleted, or the model was unloaded)."""


class MergeError(LrsError):
    """Factors that cannot be folded into the base model's own RoPE configuration."""


MISSING_IMPORT_HINT = (
    "The adapter has peft_type 'LRS', which PEFT only knows after `import rope_adapter`. "
    "Add `import rope_adapter` before `PeftModel.from_pretrained(...)`."
)
