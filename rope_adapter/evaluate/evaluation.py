"""Position sweep: score several model variants on the same samples, gold at chosen positions.

The Python side of ``rope-adapter eval`` (tasks kv_retrieval, passkey, mdqa)::

    from rope_adapter.evaluate.evaluation import evaluate_positions, load_model, make_task_samples
    from rope_adapter.scoring.variants import check_variants, parse_variants

    variants = parse_variants("base,uniform:1.05,adapter:out/adapter")
    plans = check_variants(variants, config)              # reads adapters, checks them against the config
    task, samples = make_task_samples("kv_retrieval", num_samples=20, num_pairs=20)
    model, tokenizer = load_model("smollm2-135m-instruct")
    result = evaluate_positions(model, tokenizer, task, samples, variants, plans=plans)
    result.write("eval-out")                              # results.json, results.md, positions.png

Both scores of the search are computed on exactly the same samples for every variant (one tokenisation, see
``rope_adapter.scoring.shared_prefix``): greedy accuracy by the task's benchmark rule, and the teacher-forced gold
log-probability (mean natural log-probability of the target's tokens, or of its first ``logprob_tokens``).
Each variant shares the loaded model's weights (``variants.build_variant``), so the base model is never changed.

Summaries per variant, metric and gold position: accuracy with a Wilson 95 % interval, log-probability with a
Student-t 95 % interval; differences from the reference variant (the first one unless named) are paired over
the samples, and a difference whose interval includes 0 is reported as "within noise".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rope_adapter.json_types import JsonObject, JsonValue
from rope_adapter.records import check_record, read_json
from rope_adapter.scoring.intervals import DifferenceEntry, Interval, paired_t_interval
from rope_adapter.scoring.loading import DTYPES as DTYPES  # re-exported: eval and analyze reach them as evaluation.NAME
from rope_adapter.scoring.loading import EvalError
from rope_adapter.scoring.loading import load_model as load_model
from rope_adapter.scoring.loading import load_model_config as load_model_config
from rope_adapter.scoring.loading import load_tokenizer as load_tokenizer
from rope_adapter.scoring.loading import resolve_device as resolve_device
from rope_adapter.scoring.loading import resolve_dtype as resolve_dtype
from rope_adapter.scoring.metrics import METRICS as METRICS  # re-exported: the CLI reads evaluation.METRICS
from rope_adapter.scoring.results_table import ResultsTable
from rope_adapter.scoring.shared_prefix import TokenizedTask, prepare
from rope_adapter.scoring.tasks import (
    Sample,
    Task,
    TaskError,
    build,
    get_task,
    position_tasks,
    split_records,
    task_options,
)
from rope_adapter.scoring.variants import AdapterPlan, Variant, build_variant, describe_variant

from .checkpoint import Checkpoint
from .report import positions_markdown
from .results import (
    RESULTS_FILES,
    MetricComparison,
    MetricSummary,
    PositionResultsFile,
    PositionSettings,
    ResultsFile,
    ResultsKind,
    SampleRow,
    SweepResults,
    environment,
    evaluated_variant,
)
from .results_record import position_table
from .variant_scores import plan_parts, score_variant

# ---------------------------------------------------------------------------------------------------- samples


def make_task(name: str, **options: Any) -> Task:
    """A registered task (:func:`rope_adapter.scoring.tasks.build`), its :class:`TaskError` as an :class:`EvalError`."""
    try:
        return build(name, **options)
    except TaskError as exc:
        raise EvalError(str(exc)) from exc


def make_task_samples(
    name: str,
    *,
    num_samples: int,
    seed: int = 0,
    held_out_after: int = 0,
    **options: Any,
) -> tuple[Task, list[Sample]]:
    """Build a task and the samples of ``num_samples`` records, every configured gold position each.

    The records are ``split_records(records, held_out_after, num_samples, seed)[1]``: a seeded draw, disjoint
    from the first ``held_out_after`` records of the same draw (the search split of a study that used
    ``held_out_after`` search records and the same seed). Generated tasks (kv_retrieval without a data file,
    passkey) generate exactly the records needed from ``seed``.

    Raises :class:`EvalError` (or ``FileNotFoundError``) for a bad option, empty data, too few records or
    positions outside the context, before any model is needed.
    """
    if num_samples < 1:
        raise EvalError(f"the sample count must be >= 1, got {num_samples}")
    if held_out_after < 0:
        raise EvalError(f"held_out_after must be >= 0, got {held_out_after}")
    if name not in position_tasks():
        raise EvalError(f"task {name!r} is not a position sweep; choose one of {', '.join(position_tasks())}")
    known = task_options(name)
    options = {k: v for k, v in options.items() if v is not None}
    generated = get_task(name).generates_records(options)
    if "num_records" in known:
        options["num_records"] = held_out_after + num_samples if generated else None
    if "seed" in known:
        options.setdefault("seed", seed)
    task = make_task(name, **options)
    try:
        records = task.load_records()
        _, chosen = split_records(records, held_out_after, num_samples, seed)
        samples = task.build_samples(chosen)
    except FileNotFoundError:
        raise
    except (ValueError, IndexError) as exc:
        raise EvalError(f"task {name!r}: {exc}") from exc
    if not samples:
        raise EvalError(f"task {name!r} built no samples from {num_samples} record(s)")
    return task, samples


def check_context(prompt_lengths: Sequence[int], max_positions: int | None, *, allow_longer: bool = False) -> list[str]:
    """Messages about prompts longer than the model's trained positions (an error unless ``allow_longer``)."""
    if not max_positions or not prompt_lengths:
        return []
    longest = max(prompt_lengths)
    if longest <= max_positions:
        return []
    over = sum(1 for n in prompt_lengths if n > max_positions)
    text = (
        f"{over} of {len(prompt_lengths)} prompts are longer ({longest} tokens at most) than the model's "
        f"{max_positions} positions"
    )
    if not allow_longer:
        raise EvalError(text + ": lower the record size (e.g. --num-pairs) or pass --allow-longer to extrapolate")
    return [text]


# ---------------------------------------------------------------------------------------------------- results


@dataclass(kw_only=True)
class PositionResults(SweepResults[SampleRow, PositionSettings]):
    """Every sample's score for every variant, and the per-position summaries with 95 % intervals."""

    KIND = "positions"
    ROWS_KEY = "samples"
    FIGURE = "positions.png"

    task: str
    metrics: list[str]
    positions: list[int]

    # ---- values
    def values(self, variant: str, metric: str, position: int | None = None) -> np.ndarray:
        """Per-sample scores of one variant (all positions, or one), in sample order."""
        return np.array(
            [
                r[metric]
                for r in self.rows
                if r["variant"] == variant and (position is None or r["position"] == position)
            ],
            dtype=np.float64,
        )

    def interval(self, variant: str, metric: str, position: int | None = None) -> Interval:
        """Mean and 95 % interval of one variant's metric (Wilson for accuracy, Student t for log-probs)."""
        return METRICS[metric]["interval"](self.values(variant, metric, position), self.confidence)

    def summary(self) -> dict[str, dict[str, MetricSummary]]:
        """``{variant: {metric: {"by_position": {pos: interval}, "overall": interval}}}`` as plain dicts."""
        out: dict[str, dict[str, MetricSummary]] = {}
        for name in self.variant_names:
            out[name] = {}
            for metric in self.metrics:
                out[name][metric] = {
                    "by_position": {str(p): self.interval(name, metric, p).to_dict() for p in self.positions},
                    "overall": self.interval(name, metric).to_dict(),
                }
        return out

    def comparisons(self) -> dict[str, dict[str, MetricComparison]]:
        """Paired differences of each variant from the reference, per position and overall, with verdicts."""
        out: dict[str, dict[str, MetricComparison]] = {}
        for name in self.variant_names:
            if name == self.reference:
                continue
            out[name] = {}
            for metric in self.metrics:
                better = METRICS[metric]["higher_is_better"]

                def diff(
                    p: int | None, metric: str = metric, better: bool = better, name: str = name
                ) -> DifferenceEntry:
                    return paired_t_interval(
                        self.values(name, metric, p),
                        self.values(self.reference, metric, p),
                        higher_is_better=better,
                        confidence=self.confidence,
                    ).to_dict()

                out[name][metric] = {
                    "by_position": {str(p): diff(p) for p in self.positions},
                    "overall": diff(None),
                }
        return out

    def head(self) -> JsonObject:
        return {"task": self.task, "metrics": self.metrics, "positions": self.positions}

    def record(self, data: PositionResultsFile) -> ResultsTable:
        """The results record of this sweep (:func:`~rope_adapter.evaluate.results_record.position_table`)."""
        return position_table(data)

    def renderers(self) -> tuple[Callable[..., Path], Callable[..., str]]:
        from .plots import plot_positions  # matplotlib (about 1 s) loads only when results are written

        return plot_positions, positions_markdown


# ---------------------------------------------------------------------------------------------------- running


def check_reference(variants: Sequence[Variant], reference: str | None) -> str:
    """The reference variant's name (default: the first variant); an :class:`EvalError` for no variants or a
    reference that is not one of them."""
    if not variants:
        raise EvalError("no variants to evaluate")
    names = [v.name for v in variants]
    reference = reference or names[0]
    if reference not in names:
        raise EvalError(f"reference variant {reference!r} is not among the variants {names}")
    return reference


def iter_variants(
    model: torch.nn.Module,
    variants: Sequence[Variant],
    plans: Mapping[str, AdapterPlan] | None = None,
    log: Callable[[str], None] | None = None,
) -> Iterator[tuple[Variant, torch.nn.Module]]:
    """Each variant's model in turn (built, used, released), sharing ``model``'s weights; ``log`` gets one line
    per variant (``[2/3] name  (spec)``)."""
    plans = plans or {}
    for index, variant in enumerate(variants, start=1):
        if log is not None:
            log(f"[{index}/{len(variants)}] {variant.name}  ({variant.spec})")
        with build_variant(model, variant, plans.get(variant.name)) as built:
            yield variant, built


def prepare_samples(
    samples: Sequence[Sample],
    tokenizer: Any,
    task: Task,
    *,
    chat_template: bool = False,
    system_prompt: str | None = None,
) -> TokenizedTask:
    """Tokenise the samples once for every variant (``scoring.prepare`` with the task's generation slack)."""
    try:
        return prepare(
            samples,
            tokenizer,
            chat_template=chat_template,
            system_prompt=system_prompt,
            generation_slack=task.generation_slack,
        )
    except ValueError as exc:
        raise EvalError(str(exc)) from exc


def evaluate_positions(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Task,
    samples: Sequence[Sample],
    variants: Sequence[Variant],
    *,
    plans: Mapping[str, AdapterPlan] | None = None,
    metrics: Sequence[str] = ("accuracy", "logprob"),
    logprob_tokens: int | None = None,
    max_new_tokens: int | None = None,
    chat_template: bool = False,
    system_prompt: str | None = None,
    batch_size: int = 4,
    max_batch_tokens: int = 4096,
    reference: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    settings: Mapping[str, JsonValue] | None = None,
    prepared: TokenizedTask | None = None,
    checkpoint: Checkpoint | None = None,
) -> PositionResults:
    """Score every variant on the same samples; see the module docstring.

    Args:
        model: the loaded base model (any transformers causal LM that the LRS adapter supports).
        tokenizer: its tokenizer.
        task: the task that built ``samples`` (its ``is_correct`` judges greedy answers).
        samples: from :func:`make_task_samples` or ``task.samples()``.
        variants: from ``variants.parse_variants``; ``plans`` from ``variants.check_variants``.
        metrics: any of "accuracy" (greedy decoding, benchmark rule), "tf_accuracy" (the same verdict from the
            teacher-forced pass: every answer token is the argmax) and "logprob" (gold log-probability); the last
            two come from one forward pass.
        logprob_tokens: average the log-prob over the first k target tokens (None: all of them).
        max_new_tokens: greedy answer length (default: the longest target in tokens + the task's slack; a chat
            model that restates the question before answering needs more).
        chat_template: wrap prompts in the tokenizer's chat template.
        batch_size: prefix groups (records) per forward pass; ``max_batch_tokens`` bounds continuation batches.
        reference: the variant the others are compared to (default: the first).
        progress: tqdm bars; ``log`` receives one line per variant (e.g. ``print``).
        settings: extra entries for results.json's "settings" (model name, command, seed...).
        prepared: ``scoring.prepare(samples, ...)`` done already (e.g. to check prompt lengths first); it must
            hold ``samples`` prepared with the same ``chat_template``.
        checkpoint: keeps each variant's finished parts of records and gives them back to a resumed run
            (:mod:`.checkpoint`); the parts are scored the same way without one.
    """
    metrics = list(metrics)
    bad = [m for m in metrics if m not in METRICS]
    if bad or not metrics:
        raise EvalError(f"unknown score(s) {bad or metrics}; choose from {', '.join(METRICS)}")
    if "accuracy" in metrics and not task.supports_generation:
        raise EvalError(f"task {task.name!r} has no greedy answer rule; use the logprob score only")
    reference = check_reference(variants, reference)
    if logprob_tokens is not None and logprob_tokens < 1:
        raise EvalError(f"logprob_tokens must be >= 1, got {logprob_tokens}")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise EvalError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    samples = list(samples)
    if not samples:
        raise EvalError("no samples to evaluate")
    if prepared is None:
        prepared = prepare_samples(samples, tokenizer, task, chat_template=chat_template, system_prompt=system_prompt)
    elif len(prepared) != len(samples):
        raise EvalError(f"prepared holds {len(prepared)} samples, not the {len(samples)} given")
    plan = plan_parts(
        prepared,
        samples,
        lambda part: prepare_samples(part, tokenizer, task, chat_template=chat_template, system_prompt=system_prompt),
        task,
        metrics=metrics,
        logprob_tokens=logprob_tokens,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        max_batch_tokens=max_batch_tokens,
    )
    rows: list[SampleRow] = []
    described = []
    for variant, built in iter_variants(model, variants, plans, log):
        about = describe_variant(built)
        key = Checkpoint.variant_key(variant.name, variant.spec, about)
        scored = score_variant(
            built, plan, key=key, name=variant.name, checkpoint=checkpoint, progress=progress, log=log
        )
        described.append(evaluated_variant(variant, about, scored["seconds"]))
        for i, sample in enumerate(prepared.samples):
            row: SampleRow = {
                "variant": variant.name,
                "sample": i,
                "record_id": sample.record_id,
                "position": int(sample.position),
            }
            for metric in metrics:
                row[metric] = scored["scores"][metric][i]
            if scored["predictions"] is not None:
                row["prediction"] = scored["predictions"][i]
            rows.append(row)
    all_settings: PositionSettings = {
        "num_samples": len(samples),
        "num_records": len({s.record_id for s in samples}),
        "chat_template": chat_template,
        "logprob_tokens": logprob_tokens,
        "batch_size": batch_size,
        "max_batch_tokens": max_batch_tokens,
        "prompt_tokens": {
            "min": min(len(p) for p in prepared.prompt_ids),
            "max": max(len(p) for p in prepared.prompt_ids),
        },
        "max_new_tokens": max_new_tokens or prepared.max_new_tokens,
        "environment": environment(),
        **dict(settings or {}),
    }
    return PositionResults(
        task=task.name,
        metrics=metrics,
        positions=sorted({int(s.position) for s in samples}),
        variants=described,
        rows=rows,
        reference=reference,
        settings=all_settings,
    )


def load_results(path: str | os.PathLike[str]) -> ResultsFile:
    """Read a results.json (a folder is taken to hold one): strict JSON holding the record of its ``kind``
    (:data:`~rope_adapter.evaluate.results.RESULTS_FILES`), or a :class:`~rope_adapter.errors.RecordFileError`
    naming the file and the field."""
    file = Path(path)
    if file.is_dir():
        file = file / "results.json"
    data = read_json(file, dict[str, JsonValue])
    check_record(data.get("kind"), ResultsKind, file, "kind")
    check_record(data, RESULTS_FILES[data["kind"]], file, null_numbers=True)  # a non-finite number is stored as null
    return data
