"""Held-out scores kept in the study: an interrupted held-out step resumes where it stopped, and rebuilding a
study's outputs (``--trials 0``) does not score the held-out records again.

Each configuration's scores (base, best uniform, found; the teacher-forced pass and, with ``holdout_accuracy``,
greedy decoding) are one study user attribute, :func:`holdout_key`, written as soon as they are computed
(:mod:`search.kept_scores`); they are computed a few records at a time (:data:`~search.data.PART_RECORDS`), each
part kept as it finishes, so a run stopped inside a configuration resumes at its first part not kept. They are read back only for the same factors and the same number of samples; the
records themselves are fixed by the study's fingerprint (model, dtype, task, seed, split). Values are kept as JSON
numbers, which round-trip float64 exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypedDict, TypeVar, cast

import numpy as np

from rope_adapter.scoring.logprobs import TokenLogprobs, position_means
from rope_adapter.scoring.shared_prefix import TokenizedTask

from .kept_scores import AttributeStore, kept_or_computed_in_parts
from .objective import Scored

T = TypeVar("T")

HOLDOUT_ATTR = "holdout_scores"
"""Prefix of the study user attributes that keep held-out scores."""


class StoredLogprobs(TypedDict):
    """A :class:`TokenLogprobs` as the study keeps it (its samples are the held-out task's own)."""

    values: list[list[float]]
    greedy: list[list[bool]] | None
    margins: list[list[float]] | None
    rows: list[int] | None


class StoredScored(TypedDict):
    """A :class:`~search.objective.Scored` of one configuration on the held-out records, as the study keeps it."""

    factors: list[float]
    samples: int
    per_sample: list[float]
    seconds: float
    logprobs: StoredLogprobs | None
    predictions: list[str] | None
    exact: list[bool] | None
    logprob: list[float] | None


def holdout_key(records: int, name: str, kind: str) -> str:
    """The study user attribute of configuration ``name``'s ``kind`` ("score" or "accuracy") scores on ``records``
    held-out records."""
    return f"{HOLDOUT_ATTR}:{records}:{name}:{kind}"


def _floats(values: np.ndarray | Sequence[float] | None) -> list[float] | None:
    return None if values is None else [float(v) for v in np.asarray(values, dtype=np.float64)]


def to_stored(scored: Scored, factors: Sequence[float]) -> StoredScored:
    """``scored`` as JSON-ready lists."""
    lp = scored.logprobs
    logprobs: StoredLogprobs | None = None
    if lp is not None:
        logprobs = {
            "values": [_floats(v) or [] for v in lp.values],
            "greedy": None if lp.greedy is None else [[bool(x) for x in g] for g in lp.greedy],
            "margins": None if lp.margins is None else [_floats(m) or [] for m in lp.margins],
            "rows": None if lp.rows is None else [int(r) for r in lp.rows],
        }
    return {
        "factors": [float(f) for f in factors],
        "samples": len(scored.per_sample),
        "per_sample": _floats(scored.per_sample) or [],
        "seconds": float(scored.seconds),
        "logprobs": logprobs,
        "predictions": None if scored.predictions is None else [str(p) for p in scored.predictions],
        "exact": None if scored.exact is None else [bool(x) for x in scored.exact],
        "logprob": _floats(scored.logprob),
    }


def from_stored(saved: StoredScored, task: TokenizedTask) -> Scored:
    """The :class:`Scored` that :func:`to_stored` kept, its samples those of ``task``."""
    per_sample = np.asarray(saved["per_sample"], dtype=np.float64)
    lp = saved["logprobs"]
    logprobs = None
    if lp is not None:
        logprobs = TokenLogprobs(
            samples=list(task.samples),
            values=[np.asarray(v, dtype=np.float64) for v in lp["values"]],
            greedy=None if lp["greedy"] is None else [np.asarray(g, dtype=bool) for g in lp["greedy"]],
            rows=lp["rows"],
            margins=None if lp["margins"] is None else [np.asarray(m, dtype=np.float64) for m in lp["margins"]],
        )
    return Scored(
        per_sample=per_sample,
        by_position=position_means(task.positions, per_sample),
        seconds=saved["seconds"],
        logprobs=logprobs,
        predictions=saved["predictions"],
        exact=None if saved["exact"] is None else np.asarray(saved["exact"], dtype=bool),
        logprob=None if saved["logprob"] is None else np.asarray(saved["logprob"], dtype=np.float64),
    )


def _joined(values: Sequence[list[T]] | Sequence[None]) -> list[T] | None:
    return None if values[0] is None else [x for v in values for x in (v or [])]


def join_stored(parts: Sequence[StoredScored], tasks: Sequence[TokenizedTask]) -> StoredScored:
    """The parts' scores as one :class:`StoredScored` of their samples one after the other (``tasks``: each part's
    samples); answer-form rows are renumbered as :func:`~rope_adapter.scoring.shared_prefix.prepare` numbers them
    for the joined samples (every sample's main row first, then the alternatives in sample order)."""
    first = parts[0]
    logprobs: StoredLogprobs | None = None
    if first["logprobs"] is not None:
        stored = [cast(StoredLogprobs, p["logprobs"]) for p in parts]
        rows: list[int] | None = None
        if any(lp["rows"] is not None for lp in stored):
            total = sum(len(t) for t in tasks)
            rows, samples_before, alts_before = [], 0, 0
            for lp, task in zip(stored, tasks, strict=True):
                n = len(task)
                for r in lp["rows"] if lp["rows"] is not None else range(n):
                    rows.append(samples_before + r if r < n else total + alts_before + r - n)
                samples_before, alts_before = samples_before + n, alts_before + len(task.full_ids) - n
        logprobs = {
            "values": [v for lp in stored for v in lp["values"]],
            "greedy": _joined([lp["greedy"] for lp in stored]),
            "margins": _joined([lp["margins"] for lp in stored]),
            "rows": rows,
        }
    return {
        "factors": first["factors"],
        "samples": sum(p["samples"] for p in parts),
        "per_sample": [x for p in parts for x in p["per_sample"]],
        "seconds": float(sum(p["seconds"] for p in parts)),
        "logprobs": logprobs,
        "predictions": _joined([p["predictions"] for p in parts]),
        "exact": _joined([p["exact"] for p in parts]),
        "logprob": _joined([p["logprob"] for p in parts]),
    }


def stored_or_scored(
    store: AttributeStore | None,
    key: str,
    factors: Sequence[float],
    task: TokenizedTask,
    parts: Sequence[tuple[TokenizedTask, Callable[[], Scored]]],
    on_part: Callable[[bool], None] | None = None,
) -> Scored:
    """The scores kept under ``key`` for these factors and this many samples, else computed part by part (each
    ``(part's samples, compute)``; their samples one after the other are ``task``'s), each part kept at once;
    ``on_part`` as :func:`~search.kept_scores.kept_or_computed_in_parts`."""
    tasks = [t for t, _ in parts]
    stored, _ = kept_or_computed_in_parts(
        store,
        key,
        factors,
        [lambda compute=compute: to_stored(compute(), factors) for _, compute in parts],
        combine=lambda values: join_stored(values, tasks),
        dump=lambda value: dict(value),
        load=lambda saved: cast(StoredScored, saved),
        usable=lambda saved: saved.get("samples") == len(task),
        on_part=on_part,
    )
    return from_stored(stored, task)
