"""Scores kept in the study, one study user attribute per factor set: computed once, read back on any later run.

The confirmation (:mod:`search.confirm`) and the held-out step (:mod:`search.holdout_store`) keep their scores this
way, so a run that stops part-way resumes after the last set scored and a rebuild of the outputs scores nothing
again. A kept entry is a JSON object with the ``factors`` it was scored with; it is used only for equal factors
(and whatever else ``usable`` asks), else the scores are computed afresh and replace it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class AttributeStore(Protocol):
    """Where the scores are kept: an Optuna study (``user_attrs`` and ``set_user_attr``)."""

    @property
    def user_attrs(self) -> Mapping[str, object]: ...

    def set_user_attr(self, key: str, value: Any) -> None: ...


def kept_or_computed(
    store: AttributeStore | None,
    key: str,
    factors: Sequence[float],
    compute: Callable[[], T],
    dump: Callable[[T], dict[str, object]],
    load: Callable[[dict[str, object]], T],
    usable: Callable[[dict[str, object]], bool] = lambda saved: True,
) -> tuple[T, bool]:
    """``(scores, fresh)``: the scores kept under ``key`` for these ``factors``, else ``compute()`` kept at once
    (``dump`` makes the JSON entry, ``load`` reads one back). Without a store, always computed."""
    wanted = [float(f) for f in factors]
    saved = None if store is None else store.user_attrs.get(key)
    if isinstance(saved, dict) and saved.get("factors") == wanted and usable(saved):
        return load(saved), False
    value = compute()
    if store is not None:
        store.set_user_attr(key, {**dump(value), "factors": wanted})
    return value, True
