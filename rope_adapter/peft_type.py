"""PEFT's method name "lrs": ``PeftType.LRS`` added to PEFT's str Enum (a leaf module: imports only PEFT)."""

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
