"""The search's held-out step: score the base model, the best uniform factor and the found factors on the
held-out records (the model runs here, not in the report) and judge the comparison in one sentence.

Statistics are paired (every configuration is scored on the same samples), see :mod:`rope_adapter.scoring.paired`.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .worker import Worker

from rope_adapter.differences import MeanDifference
from rope_adapter.scoring.logprobs import position_means
from rope_adapter.scoring.paired import describe_difference, differences_by_position_and_record

from .holdout_store import AttributeStore, holdout_key, stored_or_scored
from .k_selection import select_k
from .lengths import length_mask, study_lengths
from .objective import answer_score
from .part_progress import PartProgress
from .report_types import Holdout, HoldoutConfig, HoldoutDifferences, KSelectionSummary, SearchReport


def add_holdout(report: SearchReport, worker: Worker, store: AttributeStore | None = None) -> None:
    """Score base (all ones), best uniform and found factors on the held-out records and add the comparison.

    With a ``store`` (the study) each configuration's scores are kept there as soon as they are computed and read
    back on the next run instead of being scored again (:mod:`search.holdout_store`).
    """

    if worker.holdout is None:
        report["holdout"] = None
        return
    start = time.time()
    settings = worker.settings
    layers = worker.num_layers
    configs: dict[str, list[float]] = {"base": [1.0] * layers}
    chosen = report["chosen"]
    if chosen is None:
        raise ValueError("the report has no chosen trial: there is nothing to score on the held-out records")
    best_uniform = report["baselines"]["best_uniform"]
    best_uniform_factor = None if best_uniform is None else best_uniform["uniform"]
    if best_uniform_factor is not None:
        configs["best_uniform"] = [float(best_uniform_factor)] * layers
    configs["found"] = list(chosen["factors"])
    task = worker.holdout
    parts = worker.holdout_parts or [task]  # the same samples a few records at a time, each part kept as it finishes
    greedy_too = settings.holdout_accuracy and task.generate_groups is not None and worker.task.supports_generation
    distinct = {tuple(round(float(f), 9) for f in factors) for factors in configs.values()}
    bar = PartProgress(len(distinct) * len(parts) * (2 if greedy_too else 1), "held-out records", settings.progress)
    positions = task.positions
    ids = [s.record_id for s in task.samples]
    records = len(set(ids))
    scores: dict[str, np.ndarray] = {}
    accuracy: dict[str, np.ndarray] = {}
    tf_accuracy: dict[str, np.ndarray] = {}  # teacher-forced exact match (greedy's verdict without decoding)
    whole: dict[str, np.ndarray] = {}  # mean log-prob over every answer token (when the score keeps only k)
    score_name = "answer" if settings.objective.score == "soft" else settings.objective.score
    k_used = settings.objective.k if settings.objective.score == "logprob" else None
    configs_out: dict[str, HoldoutConfig] = {}
    k_selection: KSelectionSummary | None = None
    done: dict[tuple[float, ...], tuple[Any, Any]] = {}  # factors -> (scores, greedy accuracy): found may be a baseline
    for name, factors in configs.items():
        key = tuple(round(float(f), 9) for f in factors)
        if key not in done:
            done[key] = (
                stored_or_scored(
                    store,
                    holdout_key(records, name, "score"),
                    factors,
                    task,
                    [(part, partial(worker.evaluator.score, factors, part, keep_logprobs=True)) for part in parts],
                    on_part=lambda fresh: bar.update(1),
                ),
                None,
            )
        scored = done[key][0]
        if (
            settings.objective.score == "soft"
        ):  # the verdict stays in the benchmark's metric: accuracy, log-prob breaking ties
            answer = answer_score(scored.exact, scored.logprob)
            scored = replace(scored, per_sample=answer, by_position=position_means(positions, answer))
        scores[name] = scored.per_sample
        entry: HoldoutConfig = {
            "factors": factors,
            "by_position": {str(p): v for p, v in scored.by_position.items()},
            "mean": float(np.mean(list(scored.by_position.values()))),
            "worst": float(np.min(list(scored.by_position.values()))),
            "seconds": scored.seconds,
        }
        if name == "best_uniform" and best_uniform_factor is not None:
            entry["uniform"] = best_uniform_factor
        if name == "found":
            entry["trial"] = chosen["number"]
        if scored.logprobs is not None:
            whole[name] = scored.logprobs.mean(None)
            entry["mean_logprob_all_answer_tokens"] = position_dict(positions, whole[name])
            tf_accuracy[name] = scored.logprobs.exact().astype(np.float64)
            entry["tf_accuracy_by_position"] = position_dict(positions, tf_accuracy[name])
            entry["tf_accuracy"] = float(tf_accuracy[name].mean())
            if name == "base" and len(np.unique(positions)) > 1:  # k selection compares gold positions
                selection = select_k(scored.logprobs, max_k=8)
                k_selection = {
                    "best_k": selection.k,
                    "f_statistic": {str(k): v for k, v in selection.f_statistic.items()},
                    "position_means": {
                        str(k): {str(p): m for p, m in v.items()} for k, v in selection.position_means.items()
                    },
                }
        if greedy_too:
            if done[key][1] is None:
                greedy = stored_or_scored(
                    store,
                    holdout_key(records, name, "accuracy"),
                    factors,
                    task,
                    [
                        (part, partial(worker.evaluator.accuracy, factors, part, worker.task.is_correct))
                        for part in parts
                    ],
                    on_part=lambda fresh: bar.update(1),
                )
                done[key] = (scored, greedy)
            acc = done[key][1]
            accuracy[name] = acc.per_sample
            entry["accuracy_by_position"] = {str(p): v for p, v in acc.by_position.items()}
        if worker.base_nll is not None:
            entry["perplexity"] = math.exp(worker.evaluator.nll(factors))
        configs_out[name] = entry
    bar.close()

    def paired(a: str, b: str, mask: np.ndarray, measures: dict[str, dict[str, np.ndarray]]) -> HoldoutDifferences:
        """``a - b`` on the samples in ``mask``: the score, and each measure both configurations have."""
        kept_ids = [i for i, m in zip(ids, mask, strict=True) if m]
        pair: HoldoutDifferences = {
            **differences_by_position_and_record(
                scores[a][mask], scores[b][mask], positions[mask], kept_ids, settings.study.seed
            )
        }
        for measure, values in measures.items():
            if a in values and b in values:
                pair[measure] = differences_by_position_and_record(
                    values[a][mask], values[b][mask], positions[mask], kept_ids, settings.study.seed
                )
        return pair

    measures = {"accuracy": accuracy, "tf_accuracy": tf_accuracy}
    if not (settings.objective.score == "logprob" and k_used is None):
        # the first-k score can rise while copying the rest of the answer gets worse: check it here
        measures["whole_answer"] = whole
    every = np.ones(len(positions), dtype=bool)
    differences: dict[str, HoldoutDifferences] = {
        f"{a}-{b}": paired(a, b, every, measures)
        for a, b in (("found", "base"), ("found", "best_uniform"), ("best_uniform", "base"))
        if a in scores and b in scores
    }
    lengths = study_lengths(settings.task.pairs)
    by_length = {  # each length's paired differences on its own samples, in the verdict's metric too
        str(pairs): {
            key: paired(*key.split("-"), length_mask(positions, pairs), {"tf_accuracy": tf_accuracy})
            for key in differences
        }
        for pairs in (lengths if len(lengths) > 1 else ())
    }
    holdout: Holdout = {
        "records": records,
        "samples": len(task),
        "samples_per_position": {str(int(p)): int((positions == p).sum()) for p in np.unique(positions)},
        "score": score_name,
        "search_score": settings.objective.score,
        "k": k_used,
        "configs": configs_out,
        "differences": differences,
        "verdict": "",
        "seconds": 0.0,
    }
    if k_selection is not None:
        holdout["k_selection"] = k_selection
    if by_length:
        holdout["by_length"] = by_length
    holdout["verdict"] = holdout_verdict(holdout)
    holdout["seconds"] = time.time() - start
    report["holdout"] = holdout


def position_dict(positions: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """``{str(position): mean}``."""
    return {str(int(p)): float(values[positions == p].mean()) for p in np.unique(positions)}


def _verdict(d: MeanDifference) -> str:
    """The stored verdict of a paired difference (the t interval's); for reports written before verdicts were
    stored, the same question asked of ``diff`` and ``2 se``."""
    if "verdict" in d:
        return str(d["verdict"])
    se = d.get("se") or 0.0
    if se > 0 and abs(d["diff"]) > 2 * se:
        return "better" if d["diff"] > 0 else "worse"
    return "within noise"


def holdout_verdict(holdout: Holdout) -> str:
    """One honest sentence about the held-out mean: does the found curve beat base and best uniform?"""
    diffs = holdout["differences"]
    parts = []
    for key, label in (("found-base", "the unscaled model"), ("found-best_uniform", "the best uniform factor")):
        if key not in diffs:
            continue
        d = diffs[key]["mean"]
        verdict = _verdict(d)
        if verdict == "better":
            word = "beat"
        elif verdict == "worse":
            word = "are worse than"
        elif d["diff"] > 0:
            word = "are ahead of, but within the 95 % interval of,"
        elif d["diff"] < 0:
            word = "are behind, but within the 95 % interval of,"
        else:
            word = "equal"
        parts.append(f"{word} {label} ({describe_difference('diff', d).split(': ', 1)[1]})")
    if not parts:
        return "no comparison"
    text = "On the held-out records the found factors " + " and ".join(parts) + " in mean score over positions."
    acc = diffs.get("found-base", {}).get("tf_accuracy")
    if acc is not None:
        lead = [f"accuracy (teacher-forced) found - base {describe_difference('d', acc['mean']).split(': ', 1)[1]}"]
        acc_u = diffs.get("found-best_uniform", {}).get("tf_accuracy")
        if acc_u is not None:
            lead.append(f"found - best uniform {describe_difference('d', acc_u['mean']).split(': ', 1)[1]}")
        text = "Held-out " + "; ".join(lead) + ". " + text
    whole = diffs.get("found-base", {}).get("whole_answer")
    if whole is not None:
        d = whole["mean"]
        detail = describe_difference("diff", d).split(": ", 1)[1]
        if _verdict(d) == "worse" and holdout.get("k") is None:  # the score already spans the whole answer
            text += (
                f" Warning: the whole answer's log-prob is lower than the unscaled model's ({detail}): the found "
                "factors make the gold answer less likely, whatever their accuracy."
            )
        elif _verdict(d) == "worse":
            text += (
                f" Warning: over the whole answer (every token, not the first {holdout['k']}) they are worse than "
                f"the unscaled model ({detail}): the score's gain does not carry to the full answer."
            )
        else:
            text += f" Over the whole answer (every token) against the unscaled model: {detail}."
    return text
