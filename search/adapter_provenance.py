"""The adapter's provenance: the curve, the study, the task and the scores (search set, confirmation, held-out)
that the adapter folder, its model card and ``rope-adapter info`` carry, built from the search report.

The record's type is :class:`rope_adapter.provenance.Provenance` (defined in the core, which every reader uses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rope_adapter import files
from rope_adapter.provenance import ConfirmedScores, Provenance, ProvenanceScores, ProvenanceTask, SearchScores

from .lengths import by_length, is_multi, key_label
from .report_types import SearchReport
from .samplers import LEGACY_SAMPLER
from .settings import SearchSettings

if TYPE_CHECKING:
    from .worker import Worker


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
    confirmed = confirmed_scores(report, chosen["number"])
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


def confirmed_scores(report: SearchReport, trial: int) -> ConfirmedScores | None:
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
