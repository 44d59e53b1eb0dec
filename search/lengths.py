"""Studies over several record lengths (``--pairs 25 50 75``): one trial is scored at every length.

A study of one length is exactly what it was: its samples keep their gold positions. A study of several lengths
builds each length's records as a study of that length alone would (the same seeded draw and split), and gives every
sample a **key** that names its length and gold position, ``pairs * KEY_BASE + position``. Everything that works
per gold position (the objectives, racing's estimates, confirmation, the held-out statistics) then works per
(length, position): the mean objective is the mean over every (length, position), the worst is the worst of them.
A record index is one unit of the paired statistics at every length (the records of one index share the seeded
draw's stream), so racing and the held-out intervals pair by record index over all lengths.

Keys read back with :func:`split_key`; :func:`key_label` writes ``"50:12"`` (50 pairs, gold position 12).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from rope_adapter.scoring.tasks import Sample

KEY_BASE = 100_000
"""A (length, position) key is ``pairs * KEY_BASE + position`` (positions are below the length, far below this)."""


def study_lengths(pairs: int | Sequence[int]) -> tuple[int, ...]:
    """The record lengths of a study (one for a single ``pairs``)."""
    return (int(pairs),) if isinstance(pairs, int) else tuple(int(p) for p in pairs)


def is_multi(pairs: int | Sequence[int]) -> bool:
    """True for a study over several lengths."""
    return len(study_lengths(pairs)) > 1


def length_key(pairs: int, position: int) -> int:
    """The key of a gold position at a record length."""
    if not 0 <= position < KEY_BASE:
        raise ValueError(f"gold position {position} out of range for a length key")
    return int(pairs) * KEY_BASE + int(position)


def split_key(key: int | str) -> tuple[int, int]:
    """(pairs, position) of a key."""
    pairs, position = divmod(int(key), KEY_BASE)
    return pairs, position


def key_label(key: int | str, multi: bool) -> str:
    """``"50:12"`` for a key of a multi-length study, the position itself otherwise."""
    if not multi:
        return str(key)
    pairs, position = split_key(key)
    return f"{pairs}:{position}"


def keyed_samples(samples: Iterable[Sample], pairs: int) -> list[Sample]:
    """The samples of one length with their gold position replaced by the (length, position) key."""
    return [replace(s, position=length_key(pairs, s.position)) for s in samples]


def by_length(values: Mapping[str, float] | Mapping[int, float]) -> dict[str, dict[str, float]]:
    """Per length: the mean and the worst of the per-key values (``{"25": {"mean": .., "worst": ..}}``)."""
    grouped: dict[int, list[float]] = {}
    for key, value in values.items():
        grouped.setdefault(split_key(key)[0], []).append(float(value))
    return {str(p): {"mean": float(np.mean(v)), "worst": float(np.min(v))} for p, v in sorted(grouped.items())}


def length_mask(positions: np.ndarray, pairs: int) -> np.ndarray:
    """Which samples (by their keys) belong to one length."""
    return np.asarray(positions) // KEY_BASE == int(pairs)
