"""Confirm before choosing: re-score the top curves on fresh records and choose there.

The best of many noisy search-set scores is, on average, luckier than it is good: its search-set score overstates
it (the selection gap). After the search phase the best ``confirm_top`` searched curves and the best
``confirm_top`` uniform factors on the search set (under the study's selection rule) are re-scored on
``confirm_records`` confirmation records, disjoint from the search and held-out records
(:func:`~rope_adapter.search.data.load_confirmation`). The adapter and the best uniform factor are then chosen on
the confirmation score (ties keep the search-set order), and every candidate's selection gap (search-set score minus
confirmation score) is reported. The held-out records are not touched here: they stay for the verdict.

Confirmation scores are stored in the study (a study user attribute per trial and confirmation size, so it works
with any Optuna RDB storage): a resumed or re-run search reads them back and scores only new candidates. A
candidate is scored a few records at a time (:data:`~search.data.PART_RECORDS`), each part kept as it
finishes, so a search stopped inside a candidate resumes at its first part not kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict, cast

import numpy as np

from rope_adapter.scoring.logprobs import position_means

from .kept_scores import kept_or_computed_in_parts
from .objective import ObjectiveSpec
from .part_progress import PartProgress
from .report_types import Confirmation, ConfirmedCandidate, TrialRecord
from .selection import select_key, trial_record

if TYPE_CHECKING:
    from .worker import Worker

CONFIRM_ATTR = "confirmation"
"""Prefix of the study user attributes holding confirmation scores: ``confirmation:<records>:<trial number>``."""

ScoreFunction = Callable[[Sequence[float]], np.ndarray]
"""Per-sample scores of a factor set on the confirmation records."""


def confirmation_key(records: int, trial: int) -> str:
    """The study user attribute of one trial's confirmation scores on ``records`` confirmation records."""
    return f"{CONFIRM_ATTR}:{records}:{trial}"


class ConfirmationScores(TypedDict):
    """A trial's scores on the confirmation records, as the study keeps them (:func:`confirmation_key`)."""

    factors: list[float]
    sample_scores: list[float]  # per confirmation sample, rounded to 6 digits


def candidates(
    records: Sequence[TrialRecord], spec: ObjectiveSpec, select: str, top: int
) -> dict[str, list[TrialRecord]]:
    """The best ``top`` searched curves and uniform factors on the search set (finished, feasible, scored on every
    search record, not a repeat of an earlier trial), best first under the selection rule."""
    usable = [
        r
        for r in records
        if r["state"] == "COMPLETE"
        and r["evaluated"]
        and r["feasible"]
        and not r.get("raced_out")
        and r.get("duplicate_of") is None
        and r.get("factors") is not None
    ]
    out = {}
    for group, baseline in (("searched", None), ("uniform", "uniform")):
        pool = [r for r in usable if r["baseline"] == baseline]
        out[group] = sorted(pool, key=lambda r: select_key(r, spec, select), reverse=True)[:top]
    return out


def run_confirmation(
    study: Any,
    trials: Sequence[Any],
    worker: Worker,
    search_choice: tuple[int | None, int | None],
    score: ScoreFunction | None = None,
) -> Confirmation | None:
    """Score the top candidates on the confirmation records (or read their stored scores) and choose.

    Args:
        study: the Optuna study (its user attributes keep the scores).
        trials: the study's trials.
        worker: the main worker; ``worker.confirm`` holds the tokenised confirmation records.
        search_choice: (found, best uniform) trial numbers chosen on the search set.
        score: per-sample scores of a factor set on the confirmation records, all in one part (default: the worker's
            evaluator, part by part over ``worker.confirm_parts``).
    Returns:
        None when confirmation is off (``confirm_top`` 0) or there are no confirmation records.
    """
    settings = worker.settings
    task = worker.confirm
    if not settings.confirm_top or task is None:
        return None
    start = time.time()
    spec = settings.objective_spec()

    pieces = None if score is not None else (worker.confirm_parts or [task])  # None: the stand-in, one part

    def parts(factors: Sequence[float]) -> list[Callable[[], np.ndarray]]:
        if pieces is None:
            return [partial(score, factors)]
        return [partial(lambda part: worker.evaluator.score(factors, part).per_sample, part) for part in pieces]

    positions = task.positions
    records = [trial_record(t) for t in sorted(trials, key=lambda t: t.number)]
    confirmed: list[ConfirmedCandidate] = []
    chosen: dict[str, int | None] = {}
    pools = candidates(records, spec, settings.objective.select, settings.confirm_top)
    bar = PartProgress(
        sum(len(pool) for pool in pools.values()) * (1 if pieces is None else len(pieces)),
        "confirmation records",
        settings.progress,
    )
    for group, pool in pools.items():
        best: tuple[tuple[float, ...], int] | None = None
        for record in pool:
            sample_scores, fresh = kept_or_computed_in_parts(
                study,
                confirmation_key(settings.confirm_records, record["number"]),
                record["factors"],
                parts(record["factors"]),
                combine=lambda values: np.concatenate([np.asarray(v, dtype=np.float64) for v in values]),
                dump=lambda value: {"sample_scores": [round(float(x), 6) for x in value]},
                load=lambda saved: np.asarray(cast(ConfirmationScores, saved)["sample_scores"], dtype=np.float64),
                usable=lambda saved: len(cast(ConfirmationScores, saved)["sample_scores"]) == len(task),
                on_part=lambda fresh: bar.update(1),
            )
            by_position = position_means(positions, np.asarray(sample_scores, dtype=np.float64))
            summary = spec.summary(by_position)
            search = {k: float(v) for k, v in (record["objectives"] or {}).items()}
            confirmed.append(
                {
                    "trial": record["number"],
                    "group": group,
                    "uniform": record["uniform"] if group == "uniform" else None,
                    "factors": list(record["factors"]),
                    "search": search,
                    "confirmation": summary,
                    "by_position": {str(p): v for p, v in by_position.items()},
                    "gap": {k: search[k] - v for k, v in summary.items() if k in search},
                    "scored_this_run": fresh,
                }
            )
            rank = select_key({"objectives": summary}, spec, settings.objective.select)
            if best is None or rank > best[0]:  # ties keep the search-set order
                best = (rank, record["number"])
        chosen[group] = None if best is None else best[1]
    bar.close()
    found, uniform = search_choice
    return {
        "top": settings.confirm_top,
        "records": len({s.record_id for s in task.samples}),
        "samples": len(task),
        "candidates": confirmed,
        "found": chosen["searched"] if chosen["searched"] is not None else found,
        "best_uniform": chosen["uniform"] if chosen["uniform"] is not None else uniform,
        "search_found": found,
        "search_best_uniform": uniform,
        "seconds": time.time() - start,
    }
