"""Greedy generation with the shared-prefix KV cache, and greedy accuracy under a task's rule.

The teacher-forced pass (:func:`rope_adapter.scoring.shared_prefix.token_logprobs`) gives the same verdict as greedy
decoding without a decode loop (``TokenLogprobs.exact``); this module is the real decode loop, for benchmark
accuracy and for checking that agreement. Sliding-window models: generation groups its items by continuation
length, since padding between a query and generated tokens would shorten a sliding window measured in cache slots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .logprobs import mean_by_position
from .prefix_cache import (
    PrefixState,
    cache_of,
    continuation_pass,
    group_batches,
    has_sliding_layers,
    prefix_pass,
    token_chunks,
)
from .shared_prefix import TokenizedTask
from .tasks.base import Sample

Judge = Callable[[str, Sample], bool]


@dataclass
class GreedyResult:
    """Greedy answers and their judgement by the task's rule."""

    samples: list[Sample]
    predictions: list[str]
    correct: np.ndarray  # bool, one per sample

    def accuracy(self) -> float:
        """Fraction of correct answers."""
        return float(self.correct.mean())

    def by_position(self) -> dict[int, float]:
        """Accuracy at each gold position."""
        return mean_by_position(self.samples, self.correct.astype(np.float64))


@torch.inference_mode()
def greedy_generate(
    model: torch.nn.Module,
    task: TokenizedTask,
    *,
    max_new_tokens: int | None = None,
    batch_size: int = 4,
    max_batch_tokens: int = 4096,
    progress: bool = False,
) -> list[str]:
    """Greedy continuations of every prompt (decoded, special tokens skipped), reusing shared prefixes.

    Stops a sample at an end-of-sequence token or after ``max_new_tokens`` (default: the task's, sized to its
    longest target).
    """
    if task.generate_groups is None:
        raise ValueError("these samples have prompts shorter than 2 tokens (perplexity?); they cannot be generated")
    if task.tokenizer is None:
        raise ValueError("the TokenizedTask has no tokenizer to decode with; build it with prepare()")
    steps = task.max_new_tokens if max_new_tokens is None else max_new_tokens
    if steps < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {steps}")
    generated: list[list[int] | None] = [None] * len(task)
    batches = group_batches(task.generate_groups, batch_size)
    for batch in tqdm(batches, desc="greedy", disable=not progress):
        state = prefix_pass(model, [task.prompt_ids[g.members[0]][: g.shared] for g in batch], task.pad_token_id)
        items = [(row, i, g.shared) for row, g in enumerate(batch) for i in g.members]
        sizes = [len(task.prompt_ids[i]) - shared + steps for _, i, shared in items]
        if has_sliding_layers(state.cache):  # no padding inside continuations: chunk equal lengths together
            chunks = []
            for length in sorted(set(sizes)):
                same = [(it, s) for it, s in zip(items, sizes, strict=True) if s == length]
                chunks += token_chunks([it for it, _ in same], [s for _, s in same], max_batch_tokens)
        else:
            chunks = token_chunks(items, sizes, max_batch_tokens)
        for chunk in chunks:
            for i, tokens in zip(
                [i for _, i, _ in chunk], _generate_chunk(model, task, state, chunk, steps), strict=True
            ):
                generated[i] = tokens
    return [task.tokenizer.decode(g, skip_special_tokens=True) for g in generated if g is not None]


def _generate_chunk(
    model: torch.nn.Module, task: TokenizedTask, state: PrefixState, chunk: Sequence[tuple[int, int, int]], steps: int
) -> list[list[int]]:
    conts = [task.prompt_ids[i][shared:] for _, i, shared in chunk]
    device = state.mask.device
    last = torch.tensor([len(c) - 1 for c in conts], device=device)
    keep = torch.unique(last)
    out, mask, position_ids = continuation_pass(
        model, state, [row for row, _, _ in chunk], conts, task.pad_token_id, keep
    )
    column = torch.searchsorted(keep, last)
    logits = out.logits[torch.arange(len(conts), device=device), column]
    next_pos = position_ids[:, 0] + last + 1
    eos = torch.tensor(task.eos_token_ids, dtype=torch.long, device=device)
    finished = torch.zeros(len(conts), dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    cache = cache_of(out)
    for step in range(steps):
        token = logits.argmax(-1)
        tokens.append(token)
        finished |= torch.isin(token, eos)
        if bool(finished.all()) or step == steps - 1:
            break
        mask = torch.cat([mask, torch.ones((len(conts), 1), dtype=mask.dtype, device=device)], dim=1)
        out = model(
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = cache_of(out)
        logits = out.logits[:, -1]
        next_pos = next_pos + 1
    result = []
    for row in torch.stack(tokens, dim=1).tolist():
        cut = next((j for j, t in enumerate(row) if t in task.eos_token_ids), len(row))
        result.append(row[:cut])
    return result


def greedy_accuracy(model: torch.nn.Module, task: TokenizedTask, judge: Judge, **kwargs: Any) -> GreedyResult:
    """Greedy answers judged by ``judge(prediction, sample)`` (a task's ``is_correct``); kwargs go to
    :func:`greedy_generate`."""
    predictions = greedy_generate(model, task, **kwargs)
    correct = np.array([bool(judge(p, s)) for p, s in zip(predictions, task.samples, strict=True)])
    return GreedyResult(task.samples, predictions, correct)
