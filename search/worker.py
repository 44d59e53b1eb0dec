"""One process's share of a search: the model (loaded once), the tokenised samples (racing stages included) and
the evaluator that swaps factors in place.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import get_peft_model
from transformers import AutoConfig, AutoTokenizer

from rope_adapter import LrsConfig
from rope_adapter.embedded.loading import embedded_hub_id, resolve_model_path
from rope_adapter.errors import first_line
from rope_adapter.scoring import loading
from rope_adapter.scoring.loading import EvalError, load_model_config
from rope_adapter.scoring.shared_prefix import prepare
from rope_adapter.scoring.tasks import PerplexityTask, Task, apply_chat_template
from rope_adapter.scoring.variants import quiet_peft

from .constraints import FactorConstraints
from .data import (
    CONFIRM,
    HOLDOUT,
    PART_RECORDS,
    SEARCH,
    LengthSplit,
    length_samples,
    length_splits,
    part_samples,
    perplexity_text_path,
)
from .objective import Evaluator, truncate_targets
from .racing import stage_ends
from .settings import SearchError, SearchSettings


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; an unknown or unavailable device is a
    :class:`SearchError` (the one device rule of :func:`rope_adapter.scoring.loading.resolve_device`)."""
    try:
        return str(loading.resolve_device(device))
    except EvalError as exc:
        raise SearchError(str(exc)) from None


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` -> ``bfloat16`` on CUDA, ``float32`` elsewhere (:func:`rope_adapter.scoring.loading.resolve_dtype`)."""
    return str(loading.resolve_dtype(dtype, device)).replace("torch.", "")


def _text_config(settings: SearchSettings) -> Any:
    """The model's (text) config, without its weights; :class:`SearchError` when it cannot be read."""
    try:
        _, config = load_model_config(settings.model.name)
    except EvalError as exc:
        raise SearchError(str(exc)) from None
    except Exception as exc:
        first = first_line(exc)
        raise SearchError(f"cannot read the config of model {settings.model.name!r}: {first}") from None
    return getattr(config, "text_config", None) or config


def read_num_layers(settings: SearchSettings) -> int:
    """Decoder layer count from the model's config (light: no weights are loaded)."""
    return int(_text_config(settings).num_hidden_layers)


def check_record_size(settings: SearchSettings) -> None:
    """:class:`SearchError` when the task's records cannot fit the model's positions at any record length (the task
    says, from the settings and the config alone: ``Task.length_overflow``)."""
    why = settings.task.too_long(getattr(_text_config(settings), "max_position_embeddings", None))
    if why is not None:
        raise SearchError(why)


def load_model(settings: SearchSettings, device: str, dtype: str) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer) through the one loader (:func:`rope_adapter.scoring.loading.load_model`).
    Tests replace this function to prove that bad input fails before it."""
    part = settings.model
    return loading.load_model(
        part.name, dtype=dtype, device=device, device_map=part.device_map, tokenizer=part.tokenizer
    )


@dataclass
class Worker:
    """One process's share of the search: the adapted model, the tokenised samples and the objective."""

    settings: SearchSettings
    index: int
    model: Any  # PeftModel with an LRS adapter
    tokenizer: Any
    task: Task
    search: Any  # TokenizedTask (targets cut to k tokens for the log-prob score)
    holdout: Any | None  # TokenizedTask (full targets)
    evaluator: Evaluator
    constraints: FactorConstraints
    base_nll: float | None
    device: str
    dtype: str
    repeats_in_row: int = 0
    stages: list[Any] = field(default_factory=list)  # racing: the search records in stages (TokenizedTasks)
    stage_ends: list[int] = field(default_factory=list)  # records scored after each stage
    sample_records: list[int] = field(default_factory=list)  # record index (0..) of each search sample
    confirm: Any | None = None  # TokenizedTask of the confirmation records (main worker, confirm_top > 0)
    confirm_parts: list[Any] = field(default_factory=list)  # the same samples in parts (data.part_samples), in order
    holdout_parts: list[Any] = field(default_factory=list)  # the held-out samples in parts, in order

    @property
    def num_layers(self) -> int:
        return self.constraints.num_layers

    @property
    def name(self) -> str:
        return f"{os.uname().nodename if hasattr(os, 'uname') else 'host'}:{os.getpid()}:w{self.index}"


def recorded_base(model: str) -> str:
    """How a found adapter names its base model: the Hub id of an embedded model (alias or converted folder), the
    absolute path of a local folder (so that ``AutoPeftModelForCausalLM`` works from any directory), else the
    name as given (a Hub id)."""
    hub_id = embedded_hub_id(model)
    if hub_id is not None:
        return hub_id
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def make_worker(
    settings: SearchSettings,
    index: int,
    *,
    model: Any = None,
    tokenizer: Any = None,
    with_holdout: bool = True,
) -> Worker:
    """Load (or take) the model, wrap it with an all-ones LRS adapter, tokenise the samples once."""
    part, workers = settings.model, settings.study.workers
    torch.manual_seed(settings.study.seed)
    device = resolve_device(part.device)
    if device.startswith("cuda") and workers > 1 and not part.device_map and device == "cuda":
        device = f"cuda:{index % max(1, torch.cuda.device_count())}"
    dtype = resolve_dtype(part.dtype, device)
    if part.threads is not None:
        torch.set_num_threads(part.threads)
    elif device == "cpu" and workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    if model is None:
        model, tokenizer = load_model(settings, device, dtype)
    elif tokenizer is None:
        raise SearchError("a model object needs its tokenizer too (run_search(settings, model=..., tokenizer=...))")
    with quiet_peft():
        peft_model = get_peft_model(model, LrsConfig(factors=None)).eval()
    peft_model.peft_config["default"].base_model_name_or_path = recorded_base(part.name)
    num_layers = int(peft_model.peft_config["default"].num_layers)

    splits = length_splits(settings)
    task = splits[0][1]  # every length's task judges answers alike
    chat = settings.task.chat_template == "on"

    def tokenised(samples: list[Any], cut: bool = True) -> Any:
        made = prepare(samples, tokenizer, chat_template=chat, generation_slack=task.generation_slack)
        return truncate_targets(made, settings.objective.k) if cut and settings.objective.score == "logprob" else made

    def pieces(whole: Any, parts: list[list[Any]], cut: bool = True) -> list[Any]:
        """``whole``'s samples in parts, each generating up to ``whole``'s answer length; tokenising a part does
        not repeat the warnings tokenising ``whole`` gave."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [replace(tokenised(samples, cut), max_new_tokens=whole.max_new_tokens) for samples in parts]

    ends = stage_ends(settings.search_records, settings.study.race)
    stage_samples = [
        length_samples(splits, SEARCH, first, last) for first, last in zip([0, *ends[:-1]], ends, strict=True)
    ]
    # the whole search set is the stages one after the other (racing concatenates their scores in this order)
    search = tokenised([sample for stage in stage_samples for sample in stage])
    stages = pieces(search, stage_samples)
    order = {r: i for i, r in enumerate(dict.fromkeys(s.record_id for s in search.samples))}
    sample_records = [order[s.record_id] for s in search.samples]
    holdout, holdout_parts = None, []
    if with_holdout and settings.holdout_records:
        holdout = tokenised(length_samples(splits, HOLDOUT), cut=False)
        holdout_parts = pieces(holdout, part_samples(splits, HOLDOUT, PART_RECORDS), cut=False)
    confirm, confirm_parts = None, []
    if with_holdout and settings.confirm_top:
        confirm = tokenised(length_samples(splits, CONFIRM))  # scored as the search set is
        confirm_parts = pieces(confirm, part_samples(splits, CONFIRM, PART_RECORDS))
    ppl = None
    ppl_path = perplexity_text_path(settings)
    if ppl_path is not None:
        ppl_task = PerplexityTask(
            data_path=str(ppl_path),
            window_chars=settings.space.ppl_window_chars,
            num_windows=settings.space.ppl_windows,
        )
        ppl = prepare(ppl_task.samples(), tokenizer)
    evaluator = Evaluator(
        peft_model,
        settings.objective_spec(),
        judge=task.is_correct if task.supports_generation else None,
        batch_size=part.batch_size,
        max_batch_tokens=part.max_batch_tokens,
        perplexity=ppl,
    )
    space = settings.space
    constraints = FactorConstraints(
        space.bezier(), num_layers, space.parsed_layer_bounds(), space.max_step, tuple(space.constraints)
    )
    base_nll = evaluator.nll(np.ones(num_layers)) if ppl is not None else None
    parts = {"confirm_parts": confirm_parts, "holdout_parts": holdout_parts}  # scored and kept a part at a time
    return Worker(
        settings,
        index,
        peft_model,
        tokenizer,
        task,
        search,
        holdout,
        evaluator,
        constraints,
        base_nll,
        device,
        dtype,
        stages=stages,
        stage_ends=ends,
        sample_records=sample_records,
        confirm=confirm,
        **parts,
    )


def check_prompt_lengths(
    settings: SearchSettings, *, model: Any = None, tokenizer: Any = None, split: list[LengthSplit] | None = None
) -> None:
    """Refuse prompts (with their answers) longer than the model's trained positions, as ``eval`` does, before a
    study is made: only the tokenizer and the config are read (``split``: :func:`~search.data.length_splits`'s
    result, when the caller has it already)."""
    try:
        part = settings.model
        config = model.config if model is not None else AutoConfig.from_pretrained(resolve_model_path(part.name))
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(part.tokenizer or part.name))
    except Exception as exc:
        first = first_line(exc)
        raise SearchError(f"cannot read the model or tokenizer {settings.model.name!r}: {first}") from None
    config = getattr(config, "text_config", None) or config
    limit = getattr(config, "max_position_embeddings", None)
    if not limit:
        return
    splits = split if split is not None else length_splits(settings)
    samples = [s for part in (SEARCH, HOLDOUT, CONFIRM) for s in length_samples(splits, part)]
    if settings.task.chat_template == "on":
        try:
            samples = apply_chat_template(samples, tokenizer)
        except ValueError as exc:
            raise SearchError(str(exc)) from None
    longest, over = 0, 0
    for sample in samples:
        add = not sample.chat
        n = max(len(tokenizer(sample.prompt + t, add_special_tokens=add)["input_ids"]) for t in sample.targets)
        longest = max(longest, n)
        over += n > limit
    if over:
        raise SearchError(
            f"{over} of {len(samples)} prompts are longer ({longest} tokens at most) than the model's {limit} "
            "positions; lower the record size (e.g. --pairs)"
        )
