"""A name with a leading underscore stays in its module: no module of rope_adapter/, search/ or export/ imports
another's private name (``from X import _name``) or reaches for one through a module (``X._name``). A helper that
two modules need is public (no underscore) or lives where both can use it. Tests may still reach private names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"rope_adapter": "rope_adapter", "search": "rope_adapter.search", "export": "rope_adapter.export"}
"""Folder -> the package it is installed as (pyproject's package-dir)."""


def _module_names() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(source: str, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """The private names of other project modules that ``source`` (the module ``module``) imports or reaches
    through a module, one ``line: what`` each."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> the project module it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in modules:
                continue
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{target}.{alias.name}"
                elif _private(alias.name) and target != module:
                    found.append((node.lineno, f"from {target} import {alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name  # import a.b as m: m is a.b
                elif (top := alias.name.partition(".")[0]) in modules:
                    aliases[top] = top  # import a.b: a is bound
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _dotted(node.value, aliases, modules)
            if owner is not None and owner != module:
                found.append((node.lineno, f"{owner}.{node.attr}"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def _dotted(node: ast.expr, aliases: dict[str, str], modules: set[str]) -> str | None:
    """The project module an expression names (``mod`` or ``pkg.mod`` through the file's imports), else None."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value, aliases, modules)
        return f"{owner}.{node.attr}" if owner is not None and f"{owner}.{node.attr}" in modules else None
    return None


def test_no_module_uses_another_modules_private_names():
    modules = _module_names()
    found = {
        str(path.relative_to(ROOT)): uses
        for name, path in modules.items()
        if (uses := private_uses(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", set(modules)))
    }
    assert not found, f"private names used outside their module (make them public or move them): {found}"


def test_the_scan_finds_each_kind_of_private_use():
    modules = {
        "rope_adapter",
        "rope_adapter.errors",
        "rope_adapter.scoring",
        "rope_adapter.scoring.prefix",
        "rope_adapter.search",
        "rope_adapter.search.trial",
    }
    source = """
from rope_adapter.scoring.prefix import _state, public_name
from .prefix import _chunks as chunks
from rope_adapter.search import trial
from rope_adapter.scoring import prefix as prefix_mod
import rope_adapter.search.trial
from . import _not_a_module_either
from numpy import _private_elsewhere  # not ours
trial._entry
prefix_mod._select
rope_adapter.search.trial._progress
prefix_mod.public.__doc__
from rope_adapter import errors
errors.LrsError._reason  # a class's attribute, not a module's name
"""
    assert private_uses(source, "rope_adapter.scoring.generation", False, modules) == [
        "2: from rope_adapter.scoring.prefix import _state",
        "3: from rope_adapter.scoring.prefix import _chunks",
        "7: from rope_adapter.scoring import _not_a_module_either",
        "9: rope_adapter.search.trial._entry",
        "10: rope_adapter.scoring.prefix._select",
        "11: rope_adapter.search.trial._progress",
    ]
    own = "def _helper(): ...\n_helper()\nfrom rope_adapter.scoring.prefix import _state\n"
    assert private_uses(own, "rope_adapter.scoring.prefix", False, modules) == []
