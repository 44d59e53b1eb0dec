"""What :func:`rope_adapter.vllm.register` does: the ``<base>_lrs`` configs known to transformers (``import
rope_adapter``) and each exported architecture registered with vLLM, lazily (``module:Class``)."""

from __future__ import annotations

from vllm.model_executor.models.registry import ModelRegistry

import rope_adapter  # noqa: F401 - registers the <base>_lrs configs with AutoConfig: no trust_remote_code

from .models import ARCHITECTURES


def register_architectures() -> None:
    """Register every exported architecture with vLLM (served or refused); repeated calls change nothing."""
    for name in ARCHITECTURES:
        if name not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(name, f"rope_adapter.vllm.models:{name}")
