"""Scores kept in the study, one study user attribute per factor set: computed once, read back on any later run.

The confirmation (:mod:`search.confirm`) and the held-out step (:mod:`search.holdout_store`) keep their scores this
way, so a run that stops part-way resumes after the last set scored and a rebuild of the outputs scores nothing
again. A kept entry is a JSON object with the ``factors`` it was scored with; it is used only for equal factors
(and whatever else ``usable`` asks), else the scores are computed afresh and replace it.

A set scored in parts (:func:`kept_or_computed_in_parts`, e.g. the confirmation records a few at a time) also keeps
each finished part, under ``<key>:parts`` until the whole is kept, so a run stopped inside a long set loses at most
the part it was in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypedDict, TypeVar

T = TypeVar("T")

PARTS_SUFFIX = ":parts"
"""Suffix of the key under which :func:`kept_or_computed_in_parts` keeps the parts finished so far."""


class KeptParts(TypedDict):
    """The parts of a set finished so far (each as ``dump`` made it), kept under ``<key>:parts``; ``done`` is emptied
    once the whole set is kept under ``<key>``."""

    factors: list[float]
    parts: int
    done: list[dict[str, object]]


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
    return kept_or_computed_in_parts(store, key, factors, [compute], lambda values: values[0], dump, load, usable)


def kept_or_computed_in_parts(
    store: AttributeStore | None,
    key: str,
    factors: Sequence[float],
    parts: Sequence[Callable[[], T]],
    combine: Callable[[list[T]], T],
    dump: Callable[[T], dict[str, object]],
    load: Callable[[dict[str, object]], T],
    usable: Callable[[dict[str, object]], bool] = lambda saved: True,
    on_part: Callable[[bool], None] | None = None,
) -> tuple[T, bool]:
    """:func:`kept_or_computed` for a value computed in ``parts`` (``combine`` joins their values in order), each
    part kept as soon as it is computed: a run stopped part-way resumes at the first part not kept. Parts are reused
    only for equal factors and the same number of parts; ``dump`` and ``load`` serve a part and the whole alike.
    ``fresh`` is True when any part was computed by this call. ``on_part(fresh)`` is called once per part, kept or
    computed (e.g. to advance a progress bar)."""
    if not parts:
        raise ValueError(f"{key}: no parts to compute")
    wanted = [float(f) for f in factors]
    attrs = {} if store is None else store.user_attrs  # one read of the storage
    saved = attrs.get(key)
    tick = on_part or (lambda fresh: None)
    if isinstance(saved, dict) and saved.get("factors") == wanted and usable(saved):
        for _ in parts:
            tick(False)
        return load(saved), False
    progress_key = key + PARTS_SUFFIX
    kept = attrs.get(progress_key)
    done: list[dict[str, object]] = []
    if isinstance(kept, dict) and kept.get("factors") == wanted and kept.get("parts") == len(parts):
        done = [d for d in kept.get("done") or [] if isinstance(d, dict)][: len(parts)]
    values = [load(d) for d in done]
    reused = len(values)
    for _ in values:
        tick(False)
    for part in parts[len(values) :]:
        values.append(part())
        done.append(dump(values[-1]))
        if store is not None and len(values) < len(parts):
            store.set_user_attr(progress_key, KeptParts(factors=wanted, parts=len(parts), done=done))
        tick(True)
    value = combine(values)
    if store is not None:
        store.set_user_attr(key, {**dump(value), "factors": wanted})
        if kept is not None or len(parts) > 1:  # the whole is kept: the parts are no longer needed
            store.set_user_attr(progress_key, KeptParts(factors=wanted, parts=len(parts), done=[]))
    return value, reused < len(parts)
