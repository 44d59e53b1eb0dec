"""The one number formatter of every report, table and card: a missing value is "–", intervals in brackets."""

from __future__ import annotations

import math
from typing import Any

MISSING = "–"


def fmt(value: Any, digits: int = 3, *, sign: bool = False) -> str:
    """``0.125`` -> ``"0.125"`` (``"+0.125"`` with ``sign``); None, NaN or a non-number -> ``"–"``; ints as they are."""
    if isinstance(value, bool) or value is None:
        return MISSING if value is None else str(value)
    if isinstance(value, int):
        return f"{value:+d}" if sign else str(value)
    if not isinstance(value, float) or not math.isfinite(value):
        return MISSING if isinstance(value, float) else str(value)
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def fmt_interval(mean: Any, low: Any, high: Any, digits: int = 3, *, sign: bool = False) -> str:
    """``"0.225 [0.160, 0.290]"``; just the mean when there is no interval."""
    if low is None or high is None:
        return fmt(mean, digits, sign=sign)
    return f"{fmt(mean, digits, sign=sign)} [{fmt(low, digits, sign=sign)}, {fmt(high, digits, sign=sign)}]"
