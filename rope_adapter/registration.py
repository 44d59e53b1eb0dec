"""Teach PEFT the method name "lrs": extend PeftType, then register config and tuner classes."""

from __future__ import annotations

from peft.utils.peft_types import PeftType

NAME = "lrs"


def _extend_peft_type() -> PeftType:
    """Add ``PeftType.LRS`` to PEFT's str Enum, so every PEFT path that reads ``.peft_type.value`` works."""
    member_name = NAME.upper()
    existing = PeftType.__members__.get(member_name)
    if existing is not None:
        return existing
    member = str.__new__(PeftType, member_name)
    member._name_ = member_name
    member._value_ = member_name
    member.__objclass__ = PeftType
    member.__init__(member_name)
    PeftType._member_map_[member_name] = member
    PeftType._value2member_map_[member_name] = member
    PeftType._member_names_.append(member_name)
    type.__setattr__(PeftType, member_name, member)
    return member


LRS_PEFT_TYPE = _extend_peft_type()


def register() -> None:
    """Register config and tuner with PEFT (idempotent)."""
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
    from peft.utils import register_peft_method

    from .config import LrsConfig
    from .model import LrsModel

    if LRS_PEFT_TYPE in PEFT_TYPE_TO_CONFIG_MAPPING:
        return
    register_peft_method(name=NAME, config_cls=LrsConfig, model_cls=LrsModel, prefix="lrs_")
