"""One variant's scores on every sample, computed a part of the records at a time (:mod:`.checkpoint`).

The parts are consecutive records, a multiple of the batch size each, so the forward passes are those of one pass
over every record when a record's samples share one prefix (key-value retrieval): splitting changes no score. With a
:class:`~.checkpoint.Checkpoint`, each finished part is kept and a resumed run reads the kept parts back.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from tqdm.auto import tqdm

from rope_adapter.scoring.generation import greedy_accuracy
from rope_adapter.scoring.shared_prefix import TokenizedTask, token_logprobs
from rope_adapter.scoring.tasks import Sample, Task

from .checkpoint import Checkpoint, PartScores, kept_parts_line, record_parts


@dataclass(frozen=True)
class ScoringPlan:
    """How every variant is scored: the metrics, the batching and the parts (each with its tokenised samples)."""

    task: Task
    metrics: tuple[str, ...]
    logprob_tokens: int | None
    max_new_tokens: int | None
    batch_size: int
    max_batch_tokens: int
    indices: list[list[int]]  # sample indices of each part
    parts: list[TokenizedTask]
    num_samples: int


def finite(value: float) -> float:
    """``value``, or -1e9 with a warning when it is not finite (tables and JSON hold finite numbers only)."""
    if not math.isfinite(value):
        warnings.warn(f"a non-finite score ({value}) was replaced by -1e9 for the tables", stacklevel=3)
        return -1e9
    return float(value)


def plan_parts(
    prepared: TokenizedTask,
    samples: Sequence[Sample],
    tokenize: Callable[[list[Sample]], TokenizedTask],
    task: Task,
    *,
    metrics: Sequence[str],
    logprob_tokens: int | None,
    max_new_tokens: int | None,
    batch_size: int,
    max_batch_tokens: int,
) -> ScoringPlan:
    """The parts of ``prepared`` (one part, ``prepared`` itself, when its records fit in one); ``tokenize`` prepares
    a part's samples as ``prepared`` was prepared. Every part generates up to ``prepared``'s answer length."""
    indices = record_parts(prepared, batch_size)
    if len(indices) == 1:
        parts = [prepared]
    else:
        with warnings.catch_warnings():  # what tokenising warns of, preparing the whole set has said once
            warnings.simplefilter("ignore")
            parts = [
                replace(tokenize([samples[i] for i in where]), max_new_tokens=prepared.max_new_tokens)
                for where in indices
            ]
    return ScoringPlan(
        task, tuple(metrics), logprob_tokens, max_new_tokens, batch_size, max_batch_tokens, indices, parts, len(samples)
    )


def join_parts(
    parts: Sequence[PartScores], indices: Sequence[Sequence[int]], metrics: Sequence[str], n: int
) -> PartScores:
    """The parts' scores put back in sample order (``indices``: each part's sample indices)."""
    scores: dict[str, list[float]] = {m: [0.0] * n for m in metrics}
    predictions: list[str] | None = [""] * n if parts and parts[0]["predictions"] is not None else None
    for part, where in zip(parts, indices, strict=True):
        for metric in metrics:
            for i, value in zip(where, part["scores"][metric], strict=True):
                scores[metric][i] = value
        if predictions is not None:
            for i, text in zip(where, part["predictions"] or [], strict=True):
                predictions[i] = text
    return {"scores": scores, "predictions": predictions, "seconds": float(sum(p["seconds"] for p in parts))}


def score_part(model: torch.nn.Module, part: TokenizedTask, plan: ScoringPlan, progress: bool) -> PartScores:
    """The plan's metrics of ``model`` on one part (log-prob and teacher-forced accuracy from one forward pass)."""
    start = time.perf_counter()
    scores: dict[str, list[float]] = {}
    predictions: list[str] | None = None
    batching = {"batch_size": plan.batch_size, "max_batch_tokens": plan.max_batch_tokens, "progress": progress}
    if "logprob" in plan.metrics or "tf_accuracy" in plan.metrics:
        lp = token_logprobs(model, part, **batching)
        scores["logprob"] = [finite(v) for v in lp.mean(plan.logprob_tokens)]
        scores["tf_accuracy"] = [float(c) for c in lp.exact()]
    if "accuracy" in plan.metrics:
        greedy = greedy_accuracy(model, part, plan.task.is_correct, max_new_tokens=plan.max_new_tokens, **batching)
        scores["accuracy"] = [float(c) for c in greedy.correct]
        predictions = list(greedy.predictions)
    return {"scores": scores, "predictions": predictions, "seconds": time.perf_counter() - start}


def score_variant(
    model: torch.nn.Module,
    plan: ScoringPlan,
    *,
    key: str,
    name: str,
    checkpoint: Checkpoint | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> PartScores:
    """Every sample's scores of one built variant, part by part (kept in ``checkpoint`` as they finish)."""
    done = [] if checkpoint is None else checkpoint.done(key)
    if checkpoint is not None and log is not None and (line := kept_parts_line(checkpoint, key, name)) is not None:
        log(line)
    single = len(plan.parts) == 1
    records = [len({s.record_id for s in p.samples}) for p in plan.parts]
    bar: Any = None
    if progress and not single:
        bar = tqdm(total=sum(records), initial=sum(records[: len(done)]), desc=name, unit="record", leave=False)
    try:
        for j in range(len(done), len(plan.parts)):
            part = score_part(model, plan.parts[j], plan, progress=progress and single)
            done.append(part)
            if checkpoint is not None:
                checkpoint.keep(key, part)
            if bar is not None:
                bar.update(records[j])
            elif log is not None and not single:  # no bar (--no-progress, a log file): one line a part
                done_records = sum(records[: j + 1])
                log(
                    f"    {name}: {done_records} of {sum(records)} records scored "
                    f"(part {j + 1} of {len(plan.parts)}: {part['seconds']:.0f} s)"
                )
    finally:
        if bar is not None:
            bar.close()
    metrics = list(done[0]["scores"])
    return join_parts(done, plan.indices, metrics, plan.num_samples)
