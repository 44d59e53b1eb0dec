"""Command-line flags built from a settings dataclass's fields, so that a new setting is one field.

``search`` (:class:`rope_adapter.search.SearchSettings`) and ``eval`` (:class:`rope_adapter.evaluate.EvalSettings`)
build their flags here. A field's flag is ``--name-with-dashes`` (``dest`` the field's name) and its help text is
the field's ``help`` metadata; the annotation and the default give the rest:

- ``int`` or ``float`` (``| None`` or not): a typed value, the field's default as the flag's;
- ``bool``: a switch, ``--name`` when the default is False and ``--no-name`` (storing False) when it is True;
- ``tuple[T, ...]`` or ``list[T]``: one or more values (integers written ``0 4 9`` or ``0,4,9``);
- ``dict[str, ...]``: a repeatable ``KEY=VALUE`` (VALUE read as JSON when it parses; ``-`` in KEY read as ``_``);
- a ``Path`` among the types: a path that must not be blank (:func:`rope_adapter.cli.output_path`).

Anything else comes from the field's metadata (``flags``: the flag and its aliases; ``choices``, ``metavar``,
``nargs``, ``const``, ``dest``, ``type``, ``action``, ``default``: as argparse takes them; ``suffix``: text added to
the help; ``group``: the --help section, the main ``options`` one when absent) or from the command's overrides,
which win. A field with ``cli=False`` metadata has no flag.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import MISSING, Field, fields
from typing import Any

from rope_adapter.cli import IntListAction, output_path
from rope_adapter.numbers import cli_float, cli_int

FLAG_KEYS = ("flags", "dest", "type", "action", "nargs", "const", "default", "choices", "metavar", "suffix")
"""Field metadata that shapes a flag (besides ``help``, ``group`` and ``cli``)."""


def key_value(text: str) -> tuple[str, Any]:
    """argparse type of a ``dict`` field's ``KEY=VALUE``: VALUE as JSON when it parses, else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key.strip().replace("-", "_"), parsed


def settings_fields(cls: type, exclude: Collection[str] = ()) -> dict[str, Field]:
    """The fields of ``cls`` that have a flag (in declaration order): all but ``cli=False`` ones and ``exclude``."""
    return {f.name: f for f in fields(cls) if f.metadata.get("cli", True) and f.name not in exclude}


def field_default(f: Field) -> Any:
    """A field's default (a fresh one from its factory); tuples as lists, as argparse's ``nargs`` gives them."""
    value = f.default_factory() if f.default_factory is not MISSING else f.default  # type: ignore[misc]
    return list(value) if isinstance(value, tuple) else value


def _annotation(f: Field) -> str:
    return str(f.type).replace(" ", "").removesuffix("|None")


def _element(base: str) -> str | None:
    """``int`` of ``tuple[int,...]`` or ``list[int]``; None for a type that is not a sequence."""
    if base.startswith("tuple[") and base.endswith(",...]"):
        return base[len("tuple[") : -len(",...]")]
    if base.startswith("list[") and base.endswith("]"):
        return base[len("list[") : -1]
    return None


def _typed_kwargs(f: Field) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The flag names and argparse keywords a field's annotation and default give."""
    flag = "--" + f.name.replace("_", "-")
    base = _annotation(f)
    default = field_default(f)
    if base == "bool":
        if default is True:
            return ("--no-" + f.name.replace("_", "-"),), {"action": "store_false"}
        return (flag,), {"action": "store_true"}
    if base.startswith("dict["):
        return (flag,), {"type": key_value, "action": "append", "default": [], "metavar": "KEY=VALUE"}
    kwargs: dict[str, Any] = {"default": default}
    element = _element(base)
    kind = element or base
    if element is not None:
        kwargs["nargs"] = "+"
    if element == "int":
        kwargs["action"] = IntListAction
    elif kind in ("int", "float"):
        kwargs["type"] = cli_int if kind == "int" else cli_float
    elif "Path" in base.split("|"):
        kwargs["type"] = output_path
    return (flag,), kwargs


def flag_spec(f: Field, override: Mapping[str, Any] | None = None) -> tuple[tuple[str, ...], dict[str, Any]]:
    """``(flags, kwargs)`` of ``parser.add_argument`` for one field: typed from its annotation, then its metadata,
    then ``override``."""
    flags, kwargs = _typed_kwargs(f)
    extra = {k: v for k, v in f.metadata.items() if k in FLAG_KEYS} | dict(override or {})
    flags = tuple(extra.pop("flags", flags))
    suffix = extra.pop("suffix", "")
    kwargs.update(extra)
    if kwargs.get("action") == "append":
        kwargs.pop("nargs", None)
    kwargs.setdefault("dest", f.name)
    kwargs["help"] = f.metadata["help"].replace("%", "%%") + suffix
    return flags, kwargs


def add_flags(
    container: Any, field_list: Iterable[Field], overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> None:
    """One flag per field on ``container`` (a parser or an argument group), in the order given."""
    for f in field_list:
        flags, kwargs = flag_spec(f, (overrides or {}).get(f.name))
        container.add_argument(*flags, **kwargs)


def _is_switch(f: Field) -> bool:
    return _annotation(f) == "bool"


def sections(field_list: Iterable[Field]) -> dict[str | None, list[Field]]:
    """Fields by their ``group`` metadata (None: the main section), the groups in the order they first appear;
    in each, the fields in declaration order, switches (bool fields) after the flags that take a value."""
    out: dict[str | None, list[Field]] = {}
    for f in field_list:
        out.setdefault(f.metadata.get("group"), []).append(f)
    return {title: sorted(group, key=_is_switch) for title, group in out.items()}


def add_settings_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    groups: Mapping[str, Sequence[str]] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    exclude: Collection[str] = (),
) -> None:
    """One flag per field of the settings dataclass ``cls`` (but ``exclude`` and ``cli=False`` fields).

    ``groups`` (title -> field names, every field in one) lays out --help; without it the fields' ``group``
    metadata does (:func:`sections`; the main ``options`` section for fields without one).
    """
    cli = settings_fields(cls, exclude)
    if groups is None:
        layout = sections(cli.values())
        main = layout.pop(None, [])
        # the main section's switches are added last, so the usage line ends with them (as a command's own
        # --no-progress or --json); --help still lists them in that section, after its other flags
        layout = {None: [f for f in main if not _is_switch(f)], **layout, "": [f for f in main if _is_switch(f)]}
    else:
        grouped = [name for names in groups.values() for name in names]
        if sorted(grouped) != sorted(cli):
            raise RuntimeError(
                f"the flag groups and {cls.__name__} disagree: {sorted(set(grouped) ^ set(cli))} "
                "(every field with a flag is in exactly one group)"
            )
        layout = {title: [cli[name] for name in names] for title, names in groups.items()}
    for title, group in layout.items():
        add_flags(parser if not title else parser.add_argument_group(title), group, overrides)


def settings_values(
    cls: type,
    args: argparse.Namespace,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    exclude: Collection[str] = (),
) -> dict[str, Any]:
    """The field values of parsed arguments, ready for ``cls(**values)``: each read from its flag's ``dest``,
    ``KEY=VALUE`` pairs as a dict, lists as tuples where the field holds a tuple."""
    values = {}
    for name, f in settings_fields(cls, exclude).items():
        value = getattr(args, flag_spec(f, (overrides or {}).get(name))[1]["dest"])
        base = _annotation(f)
        if base.startswith("dict[") and value is not None:
            value = dict(value)
        elif base.startswith("tuple[") and isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return values
