"""Teach PEFT the method name "lrs": register the config and tuner classes for ``PeftType.LRS``."""

from __future__ import annotations

from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
from peft.utils import register_peft_method

from .config import LrsConfig
from .model import LrsModel
from .peft_type import LRS_PEFT_TYPE, NAME
from .saving import install as install_atomic_save


def register() -> None:
    """Register config and tuner with PEFT, and save LRS adapter weights atomically (idempotent)."""
    install_atomic_save()  # adapter_model.safetensors through a temporary file, as adapter_config.json
    if LRS_PEFT_TYPE in PEFT_TYPE_TO_CONFIG_MAPPING:
        return
    register_peft_method(name=NAME, config_cls=LrsConfig, model_cls=LrsModel, prefix="lrs_")
