"""The search report: every trial, the Pareto front, the baselines, the chosen trial and the held-out comparison.

:func:`build_report` over the trial records and the choice made with them (:mod:`.selection`), and
:func:`write_outputs`, which writes ``search_report.json``, ``search_report.md`` (:mod:`.report_md`) and the
figures. The adapter's provenance is built from the report by :mod:`.adapter_provenance`; the held-out scoring,
which runs the model, is :func:`rope_adapter.search.holdout.add_holdout`.

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
from typing import TYPE_CHECKING, Any

import numpy as np

from rope_adapter import files
from rope_adapter.scoring.paired import differences_by_position_and_record

from .adapter_provenance import task_summary
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
from .samplers import describe_sampler
from .selection import choose, pareto_front, search_set_warning, trial_record
from .settings import SearchSettings, settings_dict

if TYPE_CHECKING:
    from .worker import Worker


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
