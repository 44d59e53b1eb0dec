"""Settings made of parts, the way Optuna makes a sampler of parts: a settings dataclass (``SearchSettings``,
``EvalSettings``) holds **parts**, each a dataclass of related settings (the model, the task, the objective, the
study), and the commands that share a part share its class and its field names.

Every field has a **flat name**: its own name, or its ``flat`` metadata (``TaskSettings.name`` is ``task``,
``ModelSettings.name`` is ``model``). The flat names of one settings class are distinct: they are its flags' ``dest``
(:mod:`rope_adapter.cli.settings_flags`), the keywords of :func:`compose` (``SearchSettings.flat(pairs=10)``) and the
keys of :func:`flatten` (a report's ``settings``). Other spellings a user may write (``num_pairs`` for ``pairs``) are
a settings class's ``aliases``, read once, here.

A part field (:func:`part`) may name the command's own defaults for the part's fields that are left None ("the
command's default"): ``search`` scores 20 pairs unless told otherwise, ``eval`` leaves the task its own default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from .errors import LrsError
from .numbers import as_int

S = TypeVar("S")


class SettingsError(LrsError):
    """A bad setting in a settings part; the message names the setting (its flag) and what it takes."""


def setting(default: Any, help: str, **meta: Any) -> Any:
    """A settings field with its help text and anything else its flag or its part needs in its metadata (``flat``,
    ``group``, ``flags``, ``choices``, ``task_option``...: see :mod:`rope_adapter.cli.settings_flags`); a list or
    dict default is copied for every instance."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


def part(cls: type, help: str, **defaults: Any) -> Any:
    """A part field holding a ``cls`` (its own defaults unless given); ``defaults``: what the command takes for the
    part's fields left None (:func:`fill_defaults`)."""
    return field(default_factory=cls, metadata={"help": help, "part": cls, "defaults": defaults})


def is_part(f: Field) -> bool:
    return "part" in f.metadata


def flat_name(f: Field) -> str:
    return f.metadata.get("flat", f.name)


def flag(f: Field) -> str:
    """The field's first flag (``--max-batch-tokens``): how a message names the setting."""
    return (f.metadata.get("flags") or ("--" + flat_name(f).replace("_", "-"),))[0]


@dataclass(frozen=True)
class FlatField:
    """One setting of a settings class under its flat name: the field, and the part that holds it (None for the
    class's own fields)."""

    name: str
    field: Field
    part: str | None


def flat_fields(cls: type) -> dict[str, FlatField]:
    """Every setting of the settings class ``cls`` by flat name, in declaration order (a part's fields where the part
    stands)."""
    out: dict[str, FlatField] = {}
    for f in fields(cls):
        inner = [FlatField(flat_name(g), g, f.name) for g in fields(f.metadata["part"])] if is_part(f) else []
        for entry in inner or [FlatField(f.name, f, None)]:
            if entry.name in out:
                raise RuntimeError(f"{cls.__name__}: two settings have the flat name {entry.name!r}")
            out[entry.name] = entry
    return out


def compose(
    cls: type[S], values: Mapping[str, Any], *, aliases: Mapping[str, str] | None = None, error: type[LrsError]
) -> S:
    """A ``cls`` from flat keywords (each put into its part; a part left out keeps its defaults); a part's
    :class:`SettingsError` is raised as ``error`` (the command's own). ``aliases``: other names of settings."""
    flat = flat_fields(cls)
    given: dict[str, Any] = {}
    for key, value in values.items():
        name = (aliases or {}).get(key, key)
        if name not in flat:
            raise TypeError(f"{cls.__name__} has no setting {key!r}")
        if name in given:
            raise TypeError(f"{cls.__name__}: {key!r} is {name!r}, given twice")
        given[name] = value
    own: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {f.name: {} for f in fields(cls) if is_part(f)}
    for name, value in given.items():
        entry = flat[name]
        if entry.part is None:
            own[entry.field.name] = value
        else:
            parts[entry.part][entry.field.name] = value
    try:
        for f in fields(cls):
            if is_part(f) and parts[f.name]:
                own[f.name] = f.metadata["part"](**parts[f.name])
        return cls(**own)
    except SettingsError as exc:
        if isinstance(exc, error):
            raise
        raise error(str(exc)) from None


def flatten(settings: Any) -> dict[str, Any]:
    """The settings by flat name (the values themselves: a report converts them to JSON)."""
    return {
        name: getattr(settings if entry.part is None else getattr(settings, entry.part), entry.field.name)
        for name, entry in flat_fields(type(settings)).items()
    }


def fill_defaults(settings: Any) -> None:
    """Put each part's command defaults (:func:`part`) into its fields left None: a new part (a user's part is not
    changed), checked as any part is."""
    for f in fields(settings):
        missing = {
            k: v for k, v in f.metadata.get("defaults", {}).items() if getattr(getattr(settings, f.name), k) is None
        }
        if missing:
            setattr(settings, f.name, dataclasses.replace(getattr(settings, f.name), **missing))


def count(
    value: Any, f: Field | str, *, low: int = 1, optional: bool = False, error: type[LrsError] = SettingsError
) -> Any:
    """A count setting as a Python int (any integer type, or a whole float), or one ``error`` naming its flag."""
    name = f if isinstance(f, str) else flag(f)
    try:
        return as_int(value, name, error=error, low=low, optional=optional)
    except error as exc:
        detail = "" if isinstance(value, int) and not isinstance(value, bool) else f": {str(exc).split(', got ')[0]}"
        raise error(f"{name} must be >= {low}, got {value!r}{detail}") from None


def field_of(cls: type, name: str) -> Field:
    """The field ``name`` of the dataclass ``cls``."""
    return next(f for f in fields(cls) if f.name == name)
