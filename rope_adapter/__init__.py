"""rope-adapter: layer-specific RoPE scaling (arXiv 2503.04355) as a zero-parameter PEFT adapter.

``import rope_adapter`` registers the PEFT method "lrs"; then ``get_peft_model(base, LrsConfig(factors=...))``
and ``PeftModel.from_pretrained(base, "org/llama-lrs")`` work like for any other PEFT adapter.
"""

from __future__ import annotations

from . import registration as _registration
from .api import get_factors, load_lrs_config, read_adapter_factors, set_factors
from .architectures import TESTED_MODEL_TYPES, RopeSite, find_rope_site
from .config import LrsConfig
from .errors import (
    AdapterFileError,
    AdapterMismatchError,
    InvalidFactorsError,
    LrsError,
    MergeError,
    UnsupportedModelError,
)
from .factors import layer_cos_sin, validate_factors
from .layer import LrsRotaryLayer, count_layer_hooks
from .model import LrsModel

_registration.register()

from .standalone import register_tested_model_types as _register_standalone  # noqa: E402

_register_standalone()  # exported folders (`rope-adapter export`) load without trust_remote_code

from .version import __version__  # noqa: E402, F401 - rope_adapter.__version__

__all__ = [
    "AdapterFileError",
    "AdapterMismatchError",
    "InvalidFactorsError",
    "LrsConfig",
    "LrsError",
    "LrsModel",
    "LrsRotaryLayer",
    "MergeError",
    "RopeSite",
    "TESTED_MODEL_TYPES",
    "UnsupportedModelError",
    "count_layer_hooks",
    "find_rope_site",
    "get_factors",
    "layer_cos_sin",
    "load_lrs_config",
    "read_adapter_factors",
    "set_factors",
    "validate_factors",
]
