"""The types of plain JSON values, for the few records that hold whatever JSON a user or a library put there (an
adapter's own provenance, a task's options): the value is checked to be strict JSON where it comes in
(:func:`rope_adapter.files.dumps_json`), and readers look at it key by key."""

from __future__ import annotations

from typing import ForwardRef

JsonScalar = str | int | float | bool | None
"""A JSON value that is not a container."""

_JSON_VALUE = ForwardRef("JsonValue", module=__name__)  # resolved here wherever a record using it is read
JsonValue = JsonScalar | list[_JSON_VALUE] | dict[str, _JSON_VALUE]
"""Any JSON value."""

JsonObject = dict[str, JsonValue]
"""A JSON object."""

__all__ = ["JsonObject", "JsonScalar", "JsonValue"]
