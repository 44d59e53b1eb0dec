"""The search report: every trial, the Pareto front, the baselines, the chosen trial and the held-out comparison.

Pure functions over trial records (plain dicts), and :func:`write_outputs`, which writes ``search_report.json``,
``search_report.md`` (:mod:`rope_adapter.search.report_md`) and the figures. The held-out scoring, which runs the
model, is :func:`rope_adapter.search.holdout.add_holdout`.

Held-out statistics are paired (every configuration is scored on the same samples):

- per gold position: mean difference of the per-sample scores and its standard error ``sd(d) / sqrt(n)``;
- mean over positions: each record's mean over its positions, differenced, so samples of one record (which share
  their context) count once: mean and ``sd / sqrt(records)``;
- worst position: the difference of the worst position means, with a bootstrap standard error over records
  (seeded, 2000 resamples).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

import numpy as np

from rope_adapter import files
from rope_adapter.provenance import ConfirmedScores, Provenance, ProvenanceScores, ProvenanceTask, SearchScores
from rope_adapter.scoring.paired import differences_by_position_and_record

from .lengths import by_length, is_multi, key_label
from .objective import ObjectiveSpec
from .outputs import REPORT_NAME, SUMMARY_NAME
from .racing import stage_ends
from .report_md import markdown_summary
from .report_types import (
    ChosenCurve,
    ConfigSummary,
    Confirmation,
    RacingSummary,
    SearchReport,
    TimingSummary,
    TrialRecord,
)
from .results_record import holdout_table
from .samplers import LEGACY_SAMPLER, describe_sampler
from .settings import SearchSettings, settings_dict
from .storage import BASELINE_ATTR, TRIAL_ATTR

if TYPE_CHECKING:
    from .worker import Worker


# --------------------------------------------------------------------------------------------------------------
# trial records
# --------------------------------------------------------------------------------------------------------------


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


def _usable(records: Sequence[TrialRecord]) -> list[TrialRecord]:
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
    usable = _usable(records)
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
    usable = _usable(records)
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


# --------------------------------------------------------------------------------------------------------------
# paired statistics
# --------------------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------------------------


def _config_summary(record: TrialRecord | None) -> ConfigSummary | None:
    if record is None:
        return None
    return {
        "trial": record["number"],
        "baseline": record["baseline"],
        "uniform": record["uniform"],
        "factors": record["factors"],
        "control_points": record["control_points"],
        "objectives": record["objectives"],
        "by_position": record["by_position"],
        "perplexity": record["perplexity"],
    }


def build_report(
    *,
    settings: SearchSettings,
    worker: Worker,
    trials: Sequence[Any],
    constraint_names: Sequence[str],
    storage: str,
    sampler_seed: int | None,
    search_seconds: float,
    trials_this_run: int,
    confirmation: Confirmation | None = None,
) -> SearchReport:
    """Everything about the study except the held-out results (see :func:`add_holdout`); with a ``confirmation``
    (:func:`~rope_adapter.search.confirm.run_confirmation`) the adapter and the best uniform factor are its
    choices, else the search set's."""
    spec = settings.objective_spec()
    records = [trial_record(t) for t in sorted(trials, key=lambda t: t.number)]
    found, best_uniform, base = choose(records, spec, settings.objective.select)
    if confirmation is not None:
        by_number = {r["number"]: r for r in records}
        found = by_number.get(confirmation["found"], found) if confirmation["found"] is not None else found
        if confirmation["best_uniform"] is not None:
            best_uniform = by_number.get(confirmation["best_uniform"], best_uniform)
    front = pareto_front(records, spec)
    complete = [r for r in records if r["state"] == "COMPLETE"]
    evaluated = [r for r in complete if r["evaluated"]]
    eval_seconds = [r["eval_seconds"] for r in evaluated if r["eval_seconds"] and r["duplicate_of"] is None]
    starts = [r["datetime_start"] for r in complete if r["datetime_start"]]
    ends = [r["datetime_complete"] for r in complete if r["datetime_complete"]]
    span = None
    if starts and ends:
        span = (datetime.fromisoformat(max(ends)) - datetime.fromisoformat(min(starts))).total_seconds()
    n_samples = len(worker.search)
    timing: TimingSummary = {
        "search_seconds_this_run": search_seconds,
        "trials_this_run": trials_this_run,
        "trials_per_minute_this_run": trials_this_run / (search_seconds / 60) if search_seconds > 0 else None,
        "study_span_seconds": span,
        "trials_per_minute_study": len(complete) / (span / 60) if span else None,
        "evaluated_trials_per_minute_study": len(evaluated) / (span / 60) if span else None,
        "median_eval_seconds": float(np.median(eval_seconds)) if eval_seconds else None,
        "seconds_per_scored_sample": float(np.median(eval_seconds)) / n_samples if eval_seconds else None,
        "search_samples": n_samples,
        "search_records": settings.search_records,
        "tokens_per_trial": worker.search.token_counts(),
        "workers": settings.study.workers,
        "device": worker.device,
        "dtype": worker.dtype,
    }
    chosen: ChosenCurve | None = None
    if found is not None:
        chosen = {
            "number": found["number"],
            "baseline": found["baseline"],
            "factors": found["factors"],
            "control_points": found["control_points"],
            "objectives": found["objectives"],
            "by_position": found["by_position"],
            "accuracy_by_position": found.get("accuracy_by_position"),
            "logprob_by_position": found.get("logprob_by_position"),
            "on_pareto_front": found["number"] in front,
            "select": settings.objective.select if spec.kind == "pareto" else "fitness",
            "warning": search_set_warning(
                found,
                [
                    ("the unscaled model", base),
                    (f"the best uniform factor {best_uniform['uniform']:g}" if best_uniform else "", best_uniform),
                ],
                spec,
                settings.objective.select,
                {"s_min": settings.space.s_min, "s_max": settings.space.s_max},
            ),
        }
    search_comparison = {}
    if found is not None:
        positions = worker.search.positions
        ids = [s.record_id for s in worker.search.samples]
        for name, other in (("base", base), ("best_uniform", best_uniform)):
            if other is not None and other.get("sample_scores") and found.get("sample_scores"):
                # a raced-out baseline was scored on a prefix of the records: pair on the records both have
                n = min(len(found["sample_scores"]), len(other["sample_scores"]))
                search_comparison[f"found-{name}"] = differences_by_position_and_record(
                    np.array(found["sample_scores"][:n]),
                    np.array(other["sample_scores"][:n]),
                    positions[:n],
                    ids[:n],
                    settings.study.seed,
                )
    return {
        "format": "rope-adapter search report 1",
        "settings": settings_dict(settings),
        "model": {
            "name": settings.model.name,
            "num_layers": worker.num_layers,
            "base_model_name_or_path": worker.model.peft_config["default"].base_model_name_or_path,
        },
        "study": {
            "name": settings.study.name,
            "storage": storage,
            "sampler": describe_sampler(settings.study.sampler, settings.study.population),
            "sampler_seed_main_worker": sampler_seed,
            "seed": settings.study.seed,
            "objectives": spec.names,
            "constraint_names": list(constraint_names),
            "trials": len(records),
            "complete": len(complete),
            "evaluated": len(evaluated),
            "infeasible": sum(1 for r in complete if not r["feasible"]),
            "failed": sum(1 for r in records if r["state"] == "FAIL"),
            "repeats_pruned": sum(1 for r in records if r["state"] == "PRUNED" and r["duplicate_of"] is not None),
            "running": sum(1 for r in records if r["state"] == "RUNNING"),
            "racing": racing_summary(records, settings),
        },
        "task": task_summary(settings, worker),
        "timing": timing,
        "baselines": {
            "base": _config_summary(base),
            "best_uniform": _config_summary(best_uniform),
            "uniform": [_config_summary(r) for r in records if r["baseline"] == "uniform"],
        },
        "pareto_front": front,
        "chosen": chosen,
        "search_comparison": search_comparison,
        "confirmation": confirmation,
        "trials": records,
    }


def racing_summary(records: Sequence[TrialRecord], settings: SearchSettings) -> RacingSummary:
    """How many search records (prefix forward passes) the trials scored, against scoring every trial in full."""
    scored = [r for r in records if r["evaluated"] and r["duplicate_of"] is None and r.get("records_scored")]
    used = sum(int(r["records_scored"]) for r in scored)
    full = len(scored) * settings.search_records
    return {
        "stage_ends": stage_ends(settings.search_records, settings.study.race),
        "z": settings.study.race_z,
        "scored_trials": len(scored),
        "raced_out": sum(1 for r in scored if r.get("raced_out")),
        "records_scored": used,
        "records_without_racing": full,
        "saved_fraction": (1.0 - used / full) if full else 0.0,
    }


def task_summary(settings: SearchSettings, worker: Worker) -> ProvenanceTask:
    """The task part of the report and the adapter's provenance."""
    positions = sorted({int(p) for p in worker.search.positions})
    task, objective = settings.task, settings.objective
    multi = is_multi(task.pairs)
    labels = {"position_labels": {str(p): key_label(p, True) for p in positions}} if multi else {}
    return {
        "name": task.name,
        "data": task.data if task.data else "generated",
        "pairs": task.record_size,
        "positions": positions,
        **labels,  # several lengths: how readers show the (length, position) keys
        "search_records": settings.search_records,
        "holdout_records": settings.holdout_records,
        "data_seed": task.seed,
        "score": objective.score,
        "k": objective.k if objective.score == "logprob" else None,
        "chat_template": task.chat_template == "on",
        "options": task.other_options(),
    }


def provenance(report: SearchReport) -> Provenance:
    """The adapter's provenance: curve, study, task and scores."""
    settings = report["settings"]
    chosen = report["chosen"]
    if chosen is None:
        raise ValueError("the report has no chosen trial: there is no curve to describe")
    # the objective values under their names ("mean", "worst" or "fitness")
    search = cast(SearchScores, {"by_position": chosen["by_position"] or {}, **(chosen["objectives"] or {})})
    if chosen["warning"]:
        search["warning"] = chosen["warning"]
    scores: ProvenanceScores = {"objectives": report["study"]["objectives"], "search": search}
    confirmed = _confirmed(report, chosen["number"])
    if confirmed is not None:
        scores["confirmation"] = confirmed
    holdout = report.get("holdout")
    if holdout:
        found = holdout["configs"]["found"]
        scores["holdout"] = {
            "by_position": found["by_position"],
            "mean": found["mean"],
            "worst": found["worst"],
            "base_mean": holdout["configs"]["base"]["mean"],
            "best_uniform_mean": holdout["configs"].get("best_uniform", {}).get("mean"),
            "differences": {k: {"mean": v["mean"], "worst": v["worst"]} for k, v in holdout["differences"].items()},
            "verdict": holdout["verdict"],
        }
    return files.null_non_finite(
        {  # a score that is not a finite number is null, as in search_report.json
            "method": f"bezier-{settings.get('sampler', LEGACY_SAMPLER)}",
            "curve": {
                "degree": settings["degree"],
                "x_mode": settings["x_mode"],
                "control_points": chosen["control_points"] or [],
                "s_min": settings["s_min"],
                "s_max": settings["s_max"],
            },
            "study": {
                "name": report["study"]["name"],
                "storage": report["study"]["storage"],
                "trial": chosen["number"],
                "sampler": report["study"]["sampler"],
                "seed": report["study"]["seed"],
            },
            "task": report["task"],
            "scores": scores,
        }
    )


def _confirmed(report: SearchReport, trial: int) -> ConfirmedScores | None:
    """The chosen trial's scores on the confirmation records (per length too in a study over several lengths);
    None when the search did not confirm, or chose a trial it did not confirm."""
    confirmation = report.get("confirmation")
    candidates = confirmation["candidates"] if confirmation else []
    found = next((c for c in candidates if c["trial"] == trial), None)
    if confirmation is None or found is None:
        return None
    by_position = found["by_position"]
    scores = cast(ConfirmedScores, {"records": confirmation["records"], "samples": confirmation["samples"]})
    scores.update(cast(ConfirmedScores, {"by_position": by_position, **found["confirmation"]}))
    if is_multi(report["settings"]["pairs"]):
        scores["by_length"] = by_length(by_position)
    scores["search_found"] = confirmation["search_found"]
    return scores


# --------------------------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------------------------


def write_outputs(report: SearchReport, out: Path) -> Path:
    """Write ``search_report.json`` (first, so that a plotting problem cannot lose it), the Markdown summary and
    the figures; returns the JSON path."""
    from . import plots  # matplotlib (about 0.5 s) loads only when the outputs are written

    out = Path(out)
    path = out / REPORT_NAME
    files.write_json(path, files.null_non_finite(report))
    # the adapter folder carries what its model card shows, so that `rope-adapter push OUT/adapter` publishes it
    adapter = out / "adapter"
    carried = report.get("holdout") and (adapter / "adapter_config.json").is_file()
    if carried:  # the search's own results record (search/results_record.py)
        holdout_table(files.null_non_finite(report)).write(adapter)
    files.write_text(out / SUMMARY_NAME, markdown_summary(report))
    plots.plot_pareto(report, out / "pareto.png")
    plots.plot_factors(report, out / "factors.png")
    if report.get("holdout"):
        plots.plot_positions(report, out / "positions.png")
    if carried:
        for name in ("factors.png", "positions.png"):
            if (out / name).is_file():
                files.copy_file(out / name, adapter / name)
    return path
