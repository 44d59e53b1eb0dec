"""The vLLM plugin: serve exported folders with per-layer factors (model_type ``<base>_lrs``) in vLLM.

``pip install "rope-adapter[vllm]"`` installs it under vLLM's entry point group ``vllm.general_plugins``; vLLM
then calls :func:`register` in each of its processes, before it reads a model's config, so ``vllm serve FOLDER``
and ``LLM(FOLDER)`` apply the factors in ``config.json`` (``lrs_factors``) with no code from the user.

Each served architecture (:data:`~rope_adapter.vllm.served.SERVED`) is vLLM's own model class with every decoder
layer's rotary embedding replaced by a copy whose ``inv_freq`` is divided by that layer's factor (the base RoPE
type's attention scaling kept), as the adapter does. Every other exported type is refused with one line that
names what is missing.

This module imports nothing from vLLM: ``import rope_adapter`` never needs it; :func:`register` imports it when
vLLM calls it.
"""

from __future__ import annotations

from .served import SERVED, VllmServingError, refusal

__all__ = ["SERVED", "VllmServingError", "refusal", "register"]


def register() -> None:
    """vLLM's plugin hook: register the ``<base>_lrs`` configs with transformers and the architectures with vLLM.

    vLLM may call it several times and in several processes; every call after the first does nothing."""
    from .registration import register_architectures

    register_architectures()
