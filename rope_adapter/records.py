"""Reading the JSON files the project writes, each checked against its typed record (a ``TypedDict``).

:func:`read_json` parses strictly (``NaN`` and ``Infinity`` are not JSON and are refused: a file holding them was
not written by rope-adapter's strict writer, :func:`rope_adapter.files.dumps_json`) and checks the value against
its record with :func:`check_record`: the keys a record requires, and the type of every key it names (keys it does
not name are kept, as readers show them as they are). Every problem is one
:class:`~rope_adapter.errors.RecordFileError` naming the file and the field.

A file an older version wrote may lack fields added since: its reader names them (``missing_ok``, field paths
such as ``"study.racing"``), and they may be missing; nothing else is relaxed.
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from . import json_types
from .errors import RecordFileError
from .files import dumps_json

__all__ = ["check_record", "loads_json", "read_json", "refuse_constant"]


def refuse_constant(name: str) -> Any:
    """``parse_constant`` of :func:`json.loads`: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (a
    ``ValueError``). For JSON a user types on the command line; files are read with :func:`read_json`."""
    raise ValueError(f"{name} is not JSON")


def loads_json(
    text: str, where: str | os.PathLike[str], record: Any = None, *, null_numbers: bool = False,
    missing_ok: Collection[str] = (), field: str = "",
) -> Any:  # fmt: skip
    """Parse ``text`` as strict JSON (no ``NaN``/``Infinity``) and check it against ``record`` (a TypedDict or a
    type such as :data:`~rope_adapter.json_types.JsonObject`; None checks nothing). ``null_numbers``: a ``float``
    field may be null (the writer stores a non-finite number as null); ``missing_ok``: fields an older writer did not
    write; ``field``: where ``text`` sits in the file (``"line 3"`` of a JSON-lines file), the start of every field
    path."""
    try:
        value = json.loads(text, parse_constant=refuse_constant)
    except ValueError as exc:
        raise RecordFileError(os.fspath(where), field, f"is not valid JSON ({exc})") from exc
    if record is not None:
        check_record(value, record, where, field, null_numbers=null_numbers, missing_ok=missing_ok)
    return value


def read_json(
    path: str | os.PathLike[str], record: Any = None, *, null_numbers: bool = False, missing_ok: Collection[str] = ()
) -> Any:
    """Read ``path`` with :func:`loads_json`; an unreadable file is a :class:`RecordFileError` too."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordFileError(os.fspath(path), "", f"cannot be read ({exc})") from exc
    return loads_json(text, path, record, null_numbers=null_numbers, missing_ok=missing_ok)


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _describe(value: Any) -> str:
    text = dumps_json(value)  # a value read from strict JSON: always JSON again
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


@dataclass(frozen=True)
class _Rules:
    null_numbers: bool
    missing_ok: frozenset[str]


def check_record(
    value: Any, record: Any, where: str | os.PathLike[str], field: str = "", *, null_numbers: bool = False,
    missing_ok: Collection[str] = (),
) -> None:  # fmt: skip
    """Raise :class:`RecordFileError` (``where``, the field's path) unless ``value`` matches ``record``."""
    problem = _mismatch(value, record, field, _Rules(null_numbers, frozenset(missing_ok)))
    if problem is not None:
        raise RecordFileError(os.fspath(where), problem[0], problem[1])


def _mismatch(value: Any, tp: Any, field: str, rules: _Rules) -> tuple[str, str] | None:
    """(field path, problem) of the first place ``value`` does not match ``tp``, or None."""
    if tp is Any or tp is object:
        return None
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        options = get_args(tp)
        others = [o for o in options if o is not type(None)]
        if value is not None and len(others) == 1:  # an optional field: the problem of its one type
            return _mismatch(value, others[0], field, rules)
        if all(_mismatch(value, option, field, rules) for option in options):
            names = " or ".join("null" if o is type(None) else _name(o) for o in options)
            return field, f"must be {names}, found {_describe(value)}"
        return None
    if tp is type(None):
        return None if value is None else (field, f"must be null, found {_describe(value)}")
    if origin is Literal:
        return None if value in get_args(tp) else (field, f"must be one of {list(get_args(tp))}, found {value!r}")
    if _is_typed_dict(tp):
        if not isinstance(value, dict):
            return field, f"must be an object ({tp.__name__}), found {_describe(value)}"
        hints = get_type_hints(tp, localns=vars(json_types))  # JsonValue refers to itself by name
        for key in sorted(tp.__required_keys__):
            path = f"{field}.{key}" if field else key
            if key not in value and path not in rules.missing_ok:
                return path, "is missing"
        for key, hint in hints.items():
            if key in value:
                found = _mismatch(value[key], hint, f"{field}.{key}" if field else key, rules)
                if found:
                    return found
        return None
    if origin in (list, tuple, typing.Sequence) or tp in (list, tuple):
        if not isinstance(value, list):
            return field, f"must be a list, found {_describe(value)}"
        args = get_args(tp)
        if args and origin is not tuple:
            for index, item in enumerate(value):
                found = _mismatch(item, args[0], f"{field}[{index}]", rules)
                if found:
                    return found
        return None
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            return field, f"must be an object, found {_describe(value)}"
        args = get_args(tp)
        if args:
            for key, item in value.items():
                found = _mismatch(item, args[1], f"{field}.{key}" if field else key, rules)
                if found:
                    return found
        return None
    if tp is float:
        if (value is None and rules.null_numbers) or (isinstance(value, int | float) and not isinstance(value, bool)):
            return None
        return field, f"must be a number{' or null' if rules.null_numbers else ''}, found {_describe(value)}"
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return None
        return field, f"must be an integer, found {_describe(value)}"
    if tp is bool or tp is str:
        return None if isinstance(value, tp) else (field, f"must be a {_name(tp)}, found {_describe(value)}")
    return None  # a type JSON does not have (a class): not checked here
