"""Standalone model classes for exported folders with per-layer factors: ``<base model_type>_lrs``.

An exported folder (``rope-adapter export``) carries the factors in ``config.json`` (``lrs_factors``) and two
generated code files for loaders without rope-adapter (``trust_remote_code=True``). The same classes are built
here, in process, from the same mixins (``config_mixin.py``, ``modeling_mixin.py``) and registered with
transformers' auto classes on ``import rope_adapter``, so such folders load without ``trust_remote_code``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import transformers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedConfig, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from ..architectures import TESTED_MODEL_TYPES
from ..errors import LrsError
from ..version import __version__
from .codegen import write_code
from .config_mixin import LrsConfigMixin, unwrap_rope_parameters, wrap_rope_parameters
from .modeling_mixin import LrsForCausalLMMixin
from .names import MODEL_TYPE_SUFFIX, LrsNames

__all__ = [
    "CodegenError",
    "LrsConfigMixin",
    "LrsForCausalLMMixin",
    "LrsNames",
    "MODEL_TYPE_SUFFIX",
    "lrs_classes",
    "lrs_names",
    "names_for_model",
    "register_lrs_model_type",
    "register_tested_model_types",
    "unwrap_rope_parameters",
    "wrap_rope_parameters",
]


class CodegenError(LrsError):
    """No custom code can be written for this architecture (not a transformers built-in causal LM)."""


def lrs_names(base_model_type: str) -> LrsNames:
    """Names for ``base_model_type``; raises CodegenError unless transformers has a built-in causal LM for it."""
    if base_model_type.endswith(MODEL_TYPE_SUFFIX):
        raise CodegenError(
            f"model_type {base_model_type!r} is already an exported LRS model: export from its base model instead"
        )
    config_name = CONFIG_MAPPING_NAMES.get(base_model_type)
    model_name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(base_model_type)
    if not isinstance(model_name, str) or not isinstance(config_name, str):
        raise CodegenError(
            f"transformers {transformers.__version__} has no built-in causal LM for model_type "
            f"{base_model_type!r}: per-layer factors can only be exported for those"
        )
    for name in (config_name, model_name):
        if not hasattr(transformers, name):
            raise CodegenError(f"transformers does not export {name} at top level; cannot write code for it")
    if "ForCausalLM" not in model_name:
        raise CodegenError(f"{model_name} is not named *ForCausalLM; cannot name its LRS subclass")
    return LrsNames(base_model_type, config_name, model_name)


def names_for_model(model: PreTrainedModel) -> LrsNames:
    """Names for a loaded model, checking that it is exactly transformers' own class for its model_type."""
    names = lrs_names(model.config.model_type)
    for obj, expected in ((model, names.base_model_class), (model.config, names.base_config_class)):
        if type(obj) is not getattr(transformers, expected):
            raise CodegenError(
                f"{type(obj).__module__}.{type(obj).__name__} is not transformers' {expected}: exported code "
                f"subclasses the built-in class of model_type {names.base_model_type!r}"
            )
    return names


@cache
def lrs_classes(base_model_type: str) -> tuple[type[PreTrainedConfig], type[PreTrainedModel]]:
    """The config and model classes of ``<base_model_type>_lrs``, built in process from the same mixins."""
    names = lrs_names(base_model_type)
    base_config = getattr(transformers, names.base_config_class)
    base_model = getattr(transformers, names.base_model_class)
    config_cls = type(
        names.config_class,
        (LrsConfigMixin, base_config),
        {
            "model_type": names.model_type,
            "__module__": __name__,
            "__qualname__": names.config_class,
            "save_pretrained": _saving_code(base_config.save_pretrained, names),
        },
    )
    model_cls = type(
        names.model_class,
        (LrsForCausalLMMixin, base_model),
        {
            "config_class": config_cls,
            "__module__": __name__,
            "__qualname__": names.model_class,
        },
    )
    globals()[names.config_class] = config_cls  # so that pickle finds them
    globals()[names.model_class] = model_cls
    return config_cls, model_cls


def _saving_code(save_pretrained: Callable[..., Any], names: LrsNames) -> Callable[..., Any]:
    """The config's ``save_pretrained``, also writing the code files its ``auto_map`` names (a model's
    ``save_pretrained`` saves its config through it).

    A folder loaded through these in-process classes (``import rope_adapter``, no ``trust_remote_code``) keeps its
    ``auto_map`` when saved again, but transformers copies remote code only for classes it loaded as remote code:
    without this the new folder would name two ``.py`` files it does not have, and fail to load elsewhere."""

    def save(self: PreTrainedConfig, save_directory: str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any:
        result = save_pretrained(self, save_directory, *args, **kwargs)
        if getattr(self, "auto_map", None) == names.auto_map:
            write_code(Path(save_directory), names, __version__)
        return result

    save.__doc__ = save_pretrained.__doc__
    return save


def register_lrs_model_type(base_model_type: str) -> tuple[type[PreTrainedConfig], type[PreTrainedModel]]:
    """Let ``AutoConfig`` / ``AutoModelForCausalLM`` load ``<base_model_type>_lrs`` folders without remote code.

    Done on ``import rope_adapter`` for every tested architecture; call it for any other base type.
    """
    config_cls, model_cls = lrs_classes(base_model_type)
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    AutoModelForCausalLM.register(config_cls, model_cls, exist_ok=True)
    return config_cls, model_cls


def register_tested_model_types() -> None:
    """Register ``<type>_lrs`` for every tested architecture this transformers version has."""
    for model_type in TESTED_MODEL_TYPES:
        try:
            register_lrs_model_type(model_type)
        except CodegenError:  # pragma: no cover - an older transformers without this architecture
            pass
