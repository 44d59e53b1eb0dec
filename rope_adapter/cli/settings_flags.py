"""Command-line flags built from a settings dataclass's fields, so that a new setting is one field.

``search`` (:class:`rope_adapter.search.SearchSettings`) and ``eval`` (:class:`rope_adapter.evaluate.EvalSettings`)
build their flags here. Settings made of parts (:mod:`rope_adapter.composed`) give one flag per setting of each
part, under its flat name: the flag is ``--flat-name-with-dashes`` (``dest`` the flat name), its help text the
field's ``help`` metadata and its default the command's own (a default instance's); the annotation gives the rest:

- ``int`` or ``float`` (``| None`` or not): a typed value;
- ``bool``: a switch, ``--name`` when the default is False and ``--no-name`` (storing False) when it is True;
- ``tuple[T, ...]`` or ``list[T]``: one or more values (integers written ``0 4 9`` or ``0,4,9``);
- ``dict[str, ...]``: a repeatable ``KEY=VALUE`` (VALUE read as JSON when it parses; ``-`` in KEY read as ``_``);
- a ``Path`` among the types: a path that must not be blank (:func:`rope_adapter.cli.output_path`).

Anything else comes from the field's metadata (``flags``: the flag and its aliases; ``choices``, ``metavar``,
``nargs``, ``const``, ``dest``, ``type``, ``action``, ``default``: as argparse takes them; ``suffix``: text added to
the help; ``group``: the --help section, the main ``options`` one when absent) or from the command's overrides,
which win. A field with ``cli=False`` metadata has no flag. :func:`settings_values` reads the flat values back
(``cls.flat(**values)`` makes the settings).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypedDict

from rope_adapter.cli import IntListAction, output_path
from rope_adapter.composed import FlatField, flat_fields, flatten
from rope_adapter.numbers import cli_float, cli_int
from rope_adapter.records import refuse_constant

FLAG_KEYS = ("flags", "dest", "type", "action", "nargs", "const", "default", "choices", "metavar", "suffix")
"""Field metadata that shapes a flag (besides ``help``, ``group`` and ``cli``)."""


class FlagOptions(TypedDict, total=False):
    """How a flag differs from what its setting's annotation gives (field metadata or a command's override):
    ``flags`` (the flag and its aliases), ``suffix`` (added to the help), the rest as argparse takes them."""

    flags: tuple[str, ...]
    dest: str
    type: Callable[[str], Any] | None
    action: str | type[argparse.Action]
    nargs: str | int
    const: Any  # the value of a flag given alone, any type the setting holds
    default: Any  # the setting's default, any type it holds
    choices: list[str]
    metavar: str
    suffix: str


class ArgumentOptions(TypedDict, total=False):
    """The keywords of ``parser.add_argument`` for one setting."""

    dest: str
    type: Callable[[str], Any] | None
    action: str | type[argparse.Action]
    nargs: str | int
    const: Any
    default: Any
    choices: list[str]
    metavar: str
    help: str


Overrides = Mapping[str, FlagOptions]
"""A command's flag options by flat name."""


def key_value(text: str) -> tuple[str, Any]:
    """argparse type of a ``dict`` field's ``KEY=VALUE``: VALUE as JSON when it parses, else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = json.loads(value, parse_constant=refuse_constant)  # NaN and Infinity are not JSON: kept as text
    except ValueError:
        parsed = value
    return key.strip().replace("-", "_"), parsed


def settings_fields(cls: type, exclude: Collection[str] = ()) -> dict[str, FlatField]:
    """The settings of ``cls`` that have a flag, by flat name in declaration order: all but ``cli=False`` ones and
    ``exclude``."""
    return {
        name: entry
        for name, entry in flat_fields(cls).items()
        if entry.field.metadata.get("cli", True) and name not in exclude
    }


def command_defaults(cls: type) -> dict[str, Any]:
    """The command's defaults by flat name (a default instance's settings); tuples as lists, as argparse's
    ``nargs`` gives them."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in flatten(cls()).items()}


def _annotation(entry: FlatField) -> str:
    return str(entry.field.type).replace(" ", "").removesuffix("|None")


def _element(base: str) -> str | None:
    """``int`` of ``tuple[int,...]`` or ``list[int]``; None for a type that is not a sequence."""
    if base.startswith("tuple[") and base.endswith(",...]"):
        return base[len("tuple[") : -len(",...]")]
    if base.startswith("list[") and base.endswith("]"):
        return base[len("list[") : -1]
    return None


def _typed_kwargs(entry: FlatField, default: Any) -> tuple[tuple[str, ...], ArgumentOptions]:
    """The flag names and argparse keywords a setting's annotation and default give."""
    flag = "--" + entry.name.replace("_", "-")
    base = _annotation(entry)
    if base == "bool":
        if default is True:
            return ("--no-" + entry.name.replace("_", "-"),), {"action": "store_false"}
        return (flag,), {"action": "store_true"}
    if base.startswith("dict["):
        return (flag,), {"type": key_value, "action": "append", "default": [], "metavar": "KEY=VALUE"}
    kwargs: ArgumentOptions = {"default": default}
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


def flag_spec(
    entry: FlatField, default: Any = None, override: FlagOptions | None = None
) -> tuple[tuple[str, ...], ArgumentOptions]:
    """``(flags, kwargs)`` of ``parser.add_argument`` for one setting: typed from its annotation and the command's
    ``default``, then its metadata, then ``override``."""
    flags, kwargs = _typed_kwargs(entry, default)
    extra = FlagOptions(**{k: v for k, v in entry.field.metadata.items() if k in FLAG_KEYS})
    extra.update(override or {})
    flags = tuple(extra.pop("flags", flags))
    suffix = extra.pop("suffix", "")
    kwargs.update(extra)
    if kwargs.get("action") == "append":
        kwargs.pop("nargs", None)
    kwargs.setdefault("dest", entry.name)
    kwargs["help"] = entry.field.metadata["help"].replace("%", "%%") + suffix
    return flags, kwargs


def add_flags(
    container: Any,
    entries: Iterable[FlatField],
    defaults: Mapping[str, Any],
    overrides: Overrides | None = None,
) -> None:
    """One flag per setting on ``container`` (a parser or an argument group), in the order given."""
    for entry in entries:
        flags, kwargs = flag_spec(entry, defaults.get(entry.name), (overrides or {}).get(entry.name))
        container.add_argument(*flags, **kwargs)


def _is_switch(entry: FlatField) -> bool:
    return _annotation(entry) == "bool"


def sections(entries: Iterable[FlatField]) -> dict[str | None, list[FlatField]]:
    """Settings by their ``group`` metadata (None: the main section), the groups in the order they first appear;
    in each, the settings in declaration order, switches (bool fields) after the flags that take a value."""
    out: dict[str | None, list[FlatField]] = {}
    for entry in entries:
        out.setdefault(entry.field.metadata.get("group"), []).append(entry)
    return {title: sorted(group, key=_is_switch) for title, group in out.items()}


def add_settings_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    groups: Mapping[str, Sequence[str]] | None = None,
    overrides: Overrides | None = None,
    exclude: Collection[str] = (),
) -> None:
    """One flag per setting of the settings dataclass ``cls`` (but ``exclude`` and ``cli=False`` ones).

    ``groups`` (title -> flat names, every setting in one) lays out --help; without it the fields' ``group``
    metadata does (:func:`sections`; the main ``options`` section for fields without one).
    """
    cli = settings_fields(cls, exclude)
    if groups is None:
        layout = sections(cli.values())
        main = layout.pop(None, [])
        # the main section's switches are added last, so the usage line ends with them (as a command's own
        # --no-progress or --json); --help still lists them in that section, after its other flags
        layout = {None: [e for e in main if not _is_switch(e)], **layout, "": [e for e in main if _is_switch(e)]}
    else:
        grouped = [name for names in groups.values() for name in names]
        if sorted(grouped) != sorted(cli):
            raise RuntimeError(
                f"the flag groups and {cls.__name__} disagree: {sorted(set(grouped) ^ set(cli))} "
                "(every setting with a flag is in exactly one group)"
            )
        layout = {title: [cli[name] for name in names] for title, names in groups.items()}
    defaults = command_defaults(cls)
    for title, group in layout.items():
        add_flags(parser if not title else parser.add_argument_group(title), group, defaults, overrides)


def settings_values(
    cls: type,
    args: argparse.Namespace,
    overrides: Overrides | None = None,
    exclude: Collection[str] = (),
) -> dict[str, Any]:
    """The flat values of parsed arguments, ready for ``cls.flat(**values)``: each read from its flag's ``dest``,
    ``KEY=VALUE`` pairs as a dict, lists as tuples where the setting holds a tuple."""
    values = {}
    for name, entry in settings_fields(cls, exclude).items():
        value = getattr(args, flag_spec(entry, None, (overrides or {}).get(name))[1]["dest"])
        base = _annotation(entry)
        if base.startswith("dict[") and value is not None:
            value = dict(value)
        elif "tuple[" in base and isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return values
