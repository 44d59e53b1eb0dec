"""The one reader of numbers at every public boundary: factors, bounds, thresholds and sizes.

Users pass numbers in many types: Python ``int`` and ``float``, numpy scalars and 0-d arrays, 0-d torch tensors,
``Fraction``, ``Decimal``. Each function here takes any of them (and containers of them: lists, tuples, numpy
arrays and torch tensors of any real dtype, float16 and bfloat16 included) and gives back plain Python ``int`` or
``float`` (which every later step, ``json`` included, can use), or raises the caller's error (an
:class:`~rope_adapter.errors.LrsError`) naming the argument. Never a ``TypeError``, an ``OverflowError`` or a silent
conversion: a boolean is not a number, ``2.7`` is not a size (it is never truncated to 2), a string is not a
number (the command line turns its text into numbers with :func:`cli_int` and :func:`cli_float` first).

    size = as_int(batch_size, "batch_size", low=1, error=SearchError)
    s_max = as_real(s_max, "s_max", low=FACTOR_MIN, error=SearchError)
    factors = as_reals(factors, "factors", error=InvalidFactorsError)
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from .errors import LrsError

__all__ = ["as_int", "as_ints", "as_real", "as_reals", "cli_float", "cli_int", "is_scalar", "items_of", "parse_number"]

_TEXT = (str, bytes, bytearray)


def _kind(value: Any) -> str:
    """How a message names what was given instead of a number: ``'1.5' (str)``, ``a bool``, ``a 2-D array``."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D {str(value.dtype).removeprefix('torch.')} tensor"
    if isinstance(value, np.ndarray):
        return f"a {value.ndim}-D {value.dtype} array"
    return f"{value!r:.60} ({type(value).__name__})"


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool | np.bool_)


def is_scalar(value: Any) -> bool:
    """True for one number in any of the accepted types (not checked further): a Python or numpy number, a
    ``Fraction`` or ``Decimal``, a 0-d numpy array or torch tensor; False for containers, text and anything else."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return value.ndim == 0
    return isinstance(value, numbers.Number | Decimal | np.generic) and not isinstance(value, _TEXT)


def _scalar(value: Any, name: str, error: type[Exception], what: str = "a number") -> int | float | Fraction | Decimal:
    """One number as a Python int, float, Fraction or Decimal (still unchecked for range or finiteness); ``what``
    is how a refusal names what was expected (``"an integer"``)."""
    if isinstance(value, torch.Tensor):
        if value.ndim != 0:
            raise error(f"{name} must be {what}, got {_kind(value)}")
        if value.dtype == torch.bool or value.is_complex():
            raise error(f"{name} must be a real number, got {_kind(value)}")
        value = value.detach().cpu().item()
    elif isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise error(f"{name} must be {what}, got {_kind(value)}")
        if value.dtype.kind not in "iufO":
            raise error(f"{name} must be a real number, got {_kind(value)}")
        value = value.item()
    if _is_bool(value):
        raise error(f"{name} must be {what}, not a boolean ({value!r})")
    if isinstance(value, np.generic):
        if value.dtype.kind not in "iuf":
            raise error(f"{name} must be a real number, got {_kind(value)}")
        value = value.item()
    if isinstance(value, int | float | Fraction | Decimal):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise error(f"{name} must be {what}, got {_kind(value)}: {exc}") from None
    if isinstance(value, numbers.Complex):
        raise error(f"{name} must be a real number, got {_kind(value)}")
    raise error(f"{name} must be {what}, got {_kind(value)}")


def _finite(value: int | float | Fraction | Decimal) -> bool:
    if isinstance(value, Decimal):
        return value.is_finite()
    return not isinstance(value, float) or math.isfinite(value)


def _bounds_text(low: Any, high: Any, low_open: bool, high_open: bool) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}" if isinstance(low, float) else f">= {low}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}" if isinstance(high, float) else f"<= {high}")
    return " and ".join(parts)


def _check_range(
    value: Any, shown: Any, name: str, error: type[Exception], kind: str, low: Any, high: Any, low_open: bool,
    high_open: bool, hint: str,
) -> None:  # fmt: skip
    too_low = low is not None and not (value > low if low_open else value >= low)  # NaN is out of any range
    too_high = high is not None and not (value < high if high_open else value <= high)
    if too_low or too_high:
        raise error(f"{name} must be {kind} {_bounds_text(low, high, low_open, high_open)}, got {shown}{hint}")


def as_real(
    value: Any, name: str, *, error: type[Exception] = LrsError, low: float | None = None, high: float | None = None,
    low_open: bool = False, high_open: bool = False, finite: bool = True, optional: bool = False, hint: str = "",
) -> float | None:  # fmt: skip
    """``value`` as a Python float: any real number type; ``low``/``high`` bound it (``low_open``: ``> low``);
    ``finite=False`` lets NaN and infinities through (NaN only when there is no bound); ``optional``: None stays
    None. ``hint`` ends the message (``"; e.g. 1e-4"``). Anything else raises ``error`` naming ``name``."""
    return _as_number(value, name, error, False, low, high, low_open, high_open, finite, optional, hint)


def as_int(
    value: Any, name: str, *, error: type[Exception] = LrsError, low: int | None = None, high: int | None = None,
    optional: bool = False, hint: str = "",
) -> int | None:  # fmt: skip
    """``value`` as a Python int: any integer type, or a real number with a whole value (``4.0``, ``Fraction(8,
    2)``); ``2.7`` is refused, never truncated. ``low``/``high`` bound it; ``optional``: None stays None."""
    return _as_number(value, name, error, True, low, high, False, False, True, optional, hint)


def _as_number(
    value: Any, name: str, error: type[Exception], whole: bool, low: Any, high: Any, low_open: bool,
    high_open: bool, finite: bool, optional: bool, hint: str,
) -> Any:  # fmt: skip
    """The one reader behind :func:`as_real` (``whole=False``) and :func:`as_int` (``whole=True``): the number as
    a Python float or int, then its range."""
    if value is None and optional:
        return None
    number = _scalar(value, name, error, "an integer" if whole else "a number")
    result = _whole(number, value, name, error, hint) if whole else _real(number, value, name, error, finite, hint)
    shown = result if whole else f"{result:g}"
    _check_range(
        result, shown, name, error, "an integer" if whole else "a number", low, high, low_open, high_open, hint
    )
    return result


def _real(number: Any, value: Any, name: str, error: type[Exception], finite: bool, hint: str) -> float:
    try:
        result = float(number)
    except (OverflowError, ValueError, InvalidOperation):  # 10**400, Fraction(10**400), Decimal('sNaN')
        raise error(f"{name} must be a finite number, got {_kind(value)}{hint}") from None
    if finite and not (_finite(number) and math.isfinite(result)):
        raise error(f"{name} must be a finite number, got {_kind(value)}{hint}")
    return result


def _whole(number: Any, value: Any, name: str, error: type[Exception], hint: str) -> int:
    if isinstance(number, int):
        return number
    if not _finite(number) or (isinstance(number, float) and not math.isfinite(number)):
        raise error(f"{name} must be an integer, got {_kind(value)}{hint}")
    try:
        whole = number == int(number)
    except (OverflowError, ValueError, InvalidOperation):
        whole = False
    if not whole:
        raise error(f"{name} must be an integer, got {_kind(value)} (it is never rounded){hint}")
    return int(number)


def items_of(values: Any, name: str, error: type[Exception] = LrsError) -> list[Any]:
    """The items of a flat container of numbers (list, tuple, range, 1-D array or tensor), unchecked: each goes
    through :func:`as_real` or :func:`as_int` next. Text, mappings, sets, iterators and n-D arrays are refused."""
    if isinstance(values, torch.Tensor):
        if values.ndim != 1:
            raise error(f"{name} must be a flat list of numbers (a 1-D tensor), got {_kind(values)}")
        if values.dtype == torch.bool or values.is_complex():
            raise error(f"{name} must hold real numbers, got {_kind(values)}")
        return values.detach().cpu().double().tolist() if values.is_floating_point() else values.cpu().tolist()
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise error(f"{name} must be a flat list of numbers (a 1-D array), got {_kind(values)}")
        if values.dtype.kind not in "iufO":
            raise error(f"{name} must hold real numbers, got {_kind(values)}")
        return list(values)
    if isinstance(values, _TEXT) or not isinstance(values, Sequence | range):
        raise error(f"{name} must be a list of numbers, got {_kind(values)}")
    return list(values)


def _item_name(name: str, index: int) -> str:
    return f"{name}[{index}]"


def as_reals(
    values: Any,
    name: str,
    *,
    error: type[Exception] = LrsError,
    length: int | None = None,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    finite: bool = True,
    hint: str = "",
) -> list[float]:
    """A flat container of real numbers (list, tuple, range, 1-D numpy array or torch tensor of any real dtype,
    items in any number type) as a list of Python floats; ``length``: exactly that many. A scalar is refused
    (callers that take one number for all, such as factors, test :func:`is_scalar` first)."""
    items = items_of(values, name, error)
    if length is not None and len(items) != length:
        raise error(f"{name} must hold {length} numbers, got {len(items)}{hint}")
    return [
        as_real(v, _item_name(name, i), error=error, low=low, high=high, low_open=low_open, finite=finite, hint=hint)
        for i, v in enumerate(items)
    ]


# The signature repeats as_reals' keywords (those that apply to whole numbers) on purpose: each checker states its
# own options in full rather than passing **kwargs on.
def as_ints(
    values: Any,
    name: str,
    *,
    error: type[Exception] = LrsError,
    low: int | None = None,
    high: int | None = None,
    hint: str = "",
) -> list[int]:
    """:func:`as_reals` for whole numbers (positions, lengths): each item through :func:`as_int`."""
    items = items_of(values, name, error)
    return [as_int(v, _item_name(name, i), error=error, low=low, high=high, hint=hint) for i, v in enumerate(items)]


# ------------------------------------------------------------------------------------------------ the command line


def parse_number(text: str) -> int | float | Fraction:
    """A number written on a command line: ``12``, ``1_000``, ``-3``, ``0.5``, ``1e3``, ``nan``, ``inf``, ``3/2``;
    ValueError for anything else. Integers stay exact (``10**30`` is not rounded through a float)."""
    text = text.strip()
    for parse in (int, float, Fraction):
        try:
            return parse(text)
        except (ValueError, ZeroDivisionError):
            continue
    raise ValueError(f"not a number: {text!r}")


def cli_int(text: str) -> int:
    """argparse ``type`` of an integer flag: a whole number in any notation (``1e3``, ``4.0``); ``2.7`` is refused
    at parsing, never truncated."""
    try:
        return as_int(parse_number(text), "the value", error=argparse.ArgumentTypeError)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def cli_float(text: str) -> float:
    """argparse ``type`` of a real-number flag: any number (``0.5``, ``1e-4``, ``3/2``); ``nan`` and ``inf`` are
    parsed too and refused, with the setting's own message, by the settings they go to."""
    try:
        return as_real(parse_number(text), "the value", error=argparse.ArgumentTypeError, finite=False)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
