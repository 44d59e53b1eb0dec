"""Packages whose heavy modules (torch, transformers, optuna, matplotlib) load only when a name of their public
API is used: a module ``__getattr__`` (PEP 562) that imports the name's module on first use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``name`` is read from the module ``table[name]`` (a module name, relative
    to ``package`` when it starts with a dot); any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(module, package), name)

    return __getattr__
