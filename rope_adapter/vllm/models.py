"""The vLLM model classes of exported ``<base>_lrs`` folders, made on first use from vLLM's own classes.

vLLM looks a registered architecture up as ``rope_adapter.vllm.models:<Name>``; the module-level ``__getattr__``
builds the class then: vLLM's class for the base architecture with the per-layer factors applied after
construction (:func:`~rope_adapter.vllm.rotary.apply_layer_factors`), or, for an exported type the plugin does
not serve, a class whose construction raises the one-line refusal. Imports vLLM.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import vllm
from torch import nn
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from vllm.model_executor.models.registry import ModelRegistry

from ..standalone.names import LrsNames
from .rotary import apply_layer_factors
from .served import SERVED, refusal


def _lrs_arch(base_model_type: str, base_arch: str) -> str:
    return LrsNames(base_model_type, "", base_arch).model_class


ARCHITECTURES: dict[str, tuple[str, str]] = {
    _lrs_arch(t, arch): (t, arch)
    for t, arch in (*MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items(), *SERVED.items())
    if isinstance(arch, str) and "ForCausalLM" in arch
}
"""Exported architecture (``LlamaLrsForCausalLM``) -> (base model_type, base architecture): the served ones, and
every other transformers causal LM an export could name (refused in one line: a folder of such a type loads in
vLLM only with ``trust_remote_code``, and then meets the refusal instead of vLLM's Transformers backend)."""


def _vllm_class(base_arch: str) -> type[nn.Module] | None:
    """vLLM's own model class for ``base_arch``; None when it has none (or only its Transformers backend)."""
    entry = ModelRegistry.models.get(base_arch)
    cls = None if entry is None else entry.load_model_cls()
    return None if cls is None or cls.__name__.startswith("Transformers") else cls


def _served_class(name: str, base_model_type: str, base: type[nn.Module]) -> type[nn.Module]:
    def __init__(self: nn.Module, *, vllm_config: Any, prefix: str = "", **kwargs: Any) -> None:
        base.__init__(self, vllm_config=vllm_config, prefix=prefix, **kwargs)
        config = vllm_config.model_config.hf_config.get_text_config()
        apply_layer_factors(self, config.lrs_factors, config.num_hidden_layers, config.model_type)

    doc = f"vLLM's {base.__name__} with per-layer RoPE factors from config.json (``lrs_factors``)."
    return type(name, (base,), {"__init__": __init__, "__doc__": doc, "__module__": __name__, "__qualname__": name})


def _refused_class(name: str, base_model_type: str, base_arch: str) -> type[nn.Module]:
    """A class vLLM can inspect (a text-generation model) whose construction raises the one-line refusal."""
    stand_in = _vllm_class(SERVED["llama"])
    has_own = _vllm_class(base_arch) is not None

    def __init__(self: nn.Module, *, vllm_config: Any, prefix: str = "", **kwargs: Any) -> None:
        raise refusal(base_model_type, base_arch, vllm.__version__, has_own)

    doc = f"Refuses exported {base_model_type}_lrs folders (see rope_adapter.vllm.served.refusal)."
    return type(name, (stand_in,), {"__init__": __init__, "__doc__": doc, "__module__": __name__, "__qualname__": name})


@cache
def model_class(name: str) -> type[nn.Module]:
    """The vLLM model class registered as architecture ``name`` (``LlamaLrsForCausalLM``, ...)."""
    base_model_type, base_arch = ARCHITECTURES[name]
    base = _vllm_class(base_arch) if base_model_type in SERVED else None
    if base is None:
        return _refused_class(name, base_model_type, base_arch)
    return _served_class(name, base_model_type, base)


def __getattr__(name: str) -> type[nn.Module]:
    if name in ARCHITECTURES:
        return model_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
