"""Small public helpers around the tuner: swap factors in place, read them back; the adapter folder readers
(``load_lrs_config``, ``read_adapter_factors``, ``check_adapter_folder``) come from :mod:`rope_adapter.config`."""

from __future__ import annotations

from typing import Any

from .config import (  # the adapter folder readers live with the config they read
    CONFIG_NAME,
    WEIGHTS_NAME,
    check_adapter_folder,
    load_lrs_config,
    read_adapter_factors,
)
from .model import LrsModel

__all__ = [
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "check_adapter_folder",
    "get_factors",
    "load_lrs_config",
    "read_adapter_factors",
    "set_factors",
]


def _tuner(model: Any) -> LrsModel:
    tuner = getattr(model, "base_model", model)
    if not isinstance(tuner, LrsModel):
        raise TypeError(f"expected a PeftModel with an LRS adapter, got {type(model).__name__}")
    return tuner


def set_factors(model: Any, factors: float | list[float], adapter_name: str | None = None) -> None:
    """Swap an LRS adapter's factors in place on a ``PeftModel`` (no re-injection; used by every search trial)."""
    _tuner(model).set_factors(factors, adapter_name)


def get_factors(model: Any, adapter_name: str | None = None) -> list[float]:
    """The active (or named) LRS adapter's factors as floats."""
    return _tuner(model).get_factors(adapter_name)
