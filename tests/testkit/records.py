"""What a writer wrote against its typed record, key by key: :func:`rope_adapter.records.check_record` checks the
keys a record names (their presence and types); :func:`key_problems` adds the other half, every object's keys
against its TypedDict's (required ones present, none it does not name), through nested records, lists and dicts."""

from __future__ import annotations

import types
import typing
from typing import Any, Union, get_args, get_origin, get_type_hints


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def key_problems(value: Any, record: Any, path: str = "") -> list[str]:
    """``"path: problem"`` for every object whose keys are not its record's (empty: the value matches)."""
    origin = get_origin(record)
    if origin is Union or origin is types.UnionType:
        options = [o for o in get_args(record) if o is not type(None)]
        if value is None or not options:
            return []
        found = [key_problems(value, option, path) for option in options]
        return min(found, key=len)  # the option the value matches best
    if _is_typed_dict(record):
        if not isinstance(value, dict):
            return [f"{path}: not an object ({record.__name__})"]
        required = record.__required_keys__
        every = required | record.__optional_keys__
        out = []
        if missing := sorted(required - set(value)):
            out.append(f"{path}: {record.__name__} lacks {missing}")
        if extra := sorted(set(value) - every):
            out.append(f"{path}: {record.__name__} does not name {extra}")
        for key, hint in get_type_hints(record).items():
            if key in value:
                out += key_problems(value[key], hint, f"{path}.{key}")
        return out
    args = get_args(record)
    if origin in (list, typing.Sequence) and isinstance(value, list) and args:
        return [p for i, item in enumerate(value) for p in key_problems(item, args[0], f"{path}[{i}]")]
    if origin is dict and isinstance(value, dict) and args:
        return [p for k, item in value.items() for p in key_problems(item, args[1], f"{path}.{k}")]
    return []
