"""Which trials a search can choose, and the choice: trial records, the Pareto front, the found curve and the best
uniform factor on the search set, and the warning when no searched curve beat a baseline there.

Pure functions over :class:`~rope_adapter.search.report_types.TrialRecord` (made from Optuna trials by
:func:`trial_record`); the report (:mod:`.report`) and the confirmation (:mod:`.confirm`) choose with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from .objective import ObjectiveSpec
from .report_types import TrialRecord
from .storage import BASELINE_ATTR, TRIAL_ATTR


class ScoredRecord(TypedDict):
    """What :func:`select_key` reads of a trial: its objective values (a :class:`TrialRecord` is one)."""

    objectives: dict[str, float] | None


class FactorBounds(TypedDict):
    """The factor range a search ran in (what :func:`search_set_warning` suggests narrowing)."""

    s_min: float
    s_max: float


def trial_record(trial: Any) -> TrialRecord:
    """The record of an Optuna trial (FrozenTrial) of this search, as the report lists it."""
    info = dict(trial.user_attrs.get(TRIAL_ATTR) or {})
    constraints = info.get("constraints")
    evaluated = bool(info.get("evaluated")) and trial.state.name == "COMPLETE"
    values = None
    if evaluated and trial.values is not None:
        values = [float(v) for v in trial.values]
    duration = None
    if trial.datetime_start is not None and trial.datetime_complete is not None:
        duration = (trial.datetime_complete - trial.datetime_start).total_seconds()
    return {
        "number": trial.number,
        "state": trial.state.name,
        "baseline": trial.user_attrs.get(BASELINE_ATTR),
        "uniform": trial.user_attrs.get("uniform"),
        "params": dict(trial.params),
        "control_points": info.get("control_points"),
        "factors": info.get("factors"),
        "constraints": constraints,
        "feasible": constraints is not None and all(c <= 0 for c in constraints),
        "evaluated": evaluated,
        "values": values,
        "objectives": info.get("objectives"),
        "by_position": info.get("by_position"),
        "sample_scores": info.get("sample_scores"),
        "perplexity": info.get("perplexity"),
        "eval_seconds": info.get("eval_seconds"),
        "seconds": info.get("seconds"),
        "duration_seconds": duration,
        "worker": info.get("worker"),
        "duplicate_of": info.get("duplicate_of"),
        "records_scored": info.get("records_scored"),
        "raced_out": bool(info.get("raced_out")),
        "race": info.get("race"),
        "accuracy_by_position": info.get("accuracy_by_position"),
        "logprob_by_position": info.get("logprob_by_position"),
        "datetime_start": None if trial.datetime_start is None else trial.datetime_start.isoformat(),
        "datetime_complete": None if trial.datetime_complete is None else trial.datetime_complete.isoformat(),
    }


def choosable(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Trials that can be chosen: finished, feasible and scored on every search record (not raced out)."""
    return [
        r for r in records if r["state"] == "COMPLETE" and r["evaluated"] and r["feasible"] and not r.get("raced_out")
    ]


def select_key(record: ScoredRecord, spec: ObjectiveSpec, select: str) -> tuple[float, ...]:
    """Sort key (larger is better) of a usable trial under a selection rule."""
    obj = record["objectives"]
    if spec.kind == "weighted":
        return (obj["fitness"], obj["mean"])
    if select == "worst":
        return (obj["worst"], obj["mean"])
    if select == "balanced":
        return (obj["mean"] + obj["worst"], obj["mean"])
    return (obj["mean"], obj["worst"])


def pareto_front(records: Sequence[TrialRecord], spec: ObjectiveSpec) -> list[int]:
    """Numbers of the feasible evaluated trials no other one dominates (single objective: the best ones)."""
    usable = choosable(records)
    if not usable:
        return []
    if spec.kind == "weighted":
        best = max(r["objectives"]["fitness"] for r in usable)
        return sorted(r["number"] for r in usable if r["objectives"]["fitness"] == best)
    points = [(r["number"], r["objectives"]["mean"], r["objectives"]["worst"]) for r in usable]
    front = []
    for number, mean, worst in points:
        dominated = any((m >= mean and w >= worst) and (m > mean or w > worst) for n, m, w in points if n != number)
        if not dominated:
            front.append(number)
    return sorted(front)


def choose(
    records: Sequence[TrialRecord], spec: ObjectiveSpec, select: str
) -> tuple[TrialRecord | None, TrialRecord | None, TrialRecord | None]:
    """(found, best uniform, base) trials on the search set.

    ``found`` is the best searched (non-baseline) trial on the Pareto front under ``select``; only when the study
    holds no searched trial is it the best baseline. ``best uniform`` is the best enqueued uniform factor scored in
    full (uniform factors race only against other baselines, so the best one is scored in full unless the unscaled
    model beat every one of them; then it is the best of their estimates).
    """
    usable = choosable(records)
    front = set(pareto_front(records, spec))
    searched = [r for r in usable if r["baseline"] is None]
    pool = [r for r in searched if r["number"] in front] or searched or usable
    found = max(pool, key=lambda r: select_key(r, spec, select)) if pool else None
    uniforms = [r for r in usable if r["baseline"] == "uniform"]
    if not uniforms:  # every uniform factor raced out against the unscaled model: the best estimate among them
        uniforms = [
            r
            for r in records
            if r["baseline"] == "uniform" and r["state"] == "COMPLETE" and r["evaluated"] and r["feasible"]
        ]
    best_uniform = max(uniforms, key=lambda r: select_key(r, spec, select)) if uniforms else None
    base = next((r for r in records if r["baseline"] == "base" and r["state"] == "COMPLETE"), None)
    return found, best_uniform, base


def search_set_warning(
    found: TrialRecord | None,
    baselines: Sequence[tuple[str, TrialRecord | None]],
    spec: ObjectiveSpec,
    select: str,
    settings: FactorBounds,
) -> str | None:
    """A warning when the found (searched) trial does not beat a baseline on the search set itself.

    The adapter is always the best *searched* curve, so that the held-out comparison tests what the search found;
    when even the search set prefers a baseline, the budget was too small for the range, and the user must know
    before using the adapter.
    """
    if found is None or found.get("baseline") or not found.get("objectives"):
        return None
    mine = select_key(found, spec, select)
    beaten = [
        (label, other)
        for label, other in baselines
        if other is not None and other.get("objectives") and select_key(other, spec, select) >= mine
    ]
    if not beaten:
        return None
    rule = "fitness" if spec.kind == "weighted" else {"balanced": "mean + worst"}.get(select, select)
    shown = " and ".join(f"{label} ({select_key(other, spec, select)[0]:.3f})" for label, other in beaten)
    return (
        f"On the search set the found curve ({rule} {mine[0]:.3f}) does not beat {shown}: no searched curve did "
        f"within this budget. Run more trials (the same command resumes the study) or narrow the factor range "
        f"(now --s-min {settings['s_min']} --s-max {settings['s_max']}) before using this adapter."
    )
