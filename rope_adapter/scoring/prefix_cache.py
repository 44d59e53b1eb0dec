"""The forward passes that teacher-forced scoring and greedy generation share: a batch of shared prefixes run once
into a KV cache, then continuations run against rows of that cache.

Prefixes are left-padded with explicit ``position_ids`` so padding never shifts RoPE positions; continuations are
right-padded, so padding sits after every real token and cannot be attended to.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

Item = TypeVar("Item")
Group = TypeVar("Group")


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's (first) parameters."""
    return next(model.parameters()).device


def cache_of(output: Any) -> Any:
    """The KV cache of a forward pass's output (``cache``, else ``past_key_values``)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _select_cache(cache: Any, index: torch.Tensor) -> Any:
    """A new cache holding rows ``index`` of ``cache`` (which stays untouched)."""
    new = copy.copy(cache)
    new.layers = []
    for layer in cache.layers:
        layer_copy = copy.copy(layer)
        layer_copy.batch_select_indices(index)
        new.layers.append(layer_copy)
    return new


def has_sliding_layers(cache: Any) -> bool:
    """True when a layer of the cache keeps a sliding window (measured in cache slots, padding included)."""
    return any(getattr(layer, "is_sliding", False) for layer in cache.layers)


@dataclass
class PrefixState:
    """A batch of prefixes after :func:`prefix_pass`: their cache and what continuations need to extend them."""

    cache: Any
    mask: torch.Tensor  # [G, P] long, left padding
    lengths: torch.Tensor  # [G] long, real tokens per row
    last_logprobs: torch.Tensor  # [G, V] float32 log-softmax of the last prefix position


def prefix_pass(model: torch.nn.Module, seqs: Sequence[Sequence[int]], pad_id: int) -> PrefixState:
    """Run the prefixes ``seqs`` (left-padded with ``pad_id``) through ``model`` once, keeping their cache."""
    device = model_device(model)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True, logits_to_keep=1)
    return PrefixState(
        cache=cache_of(out),
        mask=mask,
        lengths=mask.sum(-1),
        last_logprobs=out.logits[:, -1, :].float().log_softmax(-1),
    )


def _continuation_inputs(
    state: PrefixState, rows: Sequence[int], conts: Sequence[Sequence[int]], pad_id: int
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cache rows, right-padded continuation ids, the full attention mask and position ids."""
    device = state.mask.device
    index = torch.tensor(rows, dtype=torch.long, device=device)
    width = max(len(c) for c in conts)
    ids = torch.full((len(conts), width), pad_id, dtype=torch.long)
    cmask = torch.zeros((len(conts), width), dtype=torch.long)
    for r, cont in enumerate(conts):
        ids[r, : len(cont)] = torch.tensor(cont, dtype=torch.long)
        cmask[r, : len(cont)] = 1
    ids, cmask = ids.to(device), cmask.to(device)
    mask = torch.cat([state.mask.index_select(0, index), cmask], dim=1)
    position_ids = state.lengths.index_select(0, index)[:, None] + torch.arange(width, device=device)[None, :]
    return _select_cache(state.cache, index), ids, mask, position_ids


def continuation_pass(
    model: torch.nn.Module,
    state: PrefixState,
    rows: Sequence[int],
    conts: Sequence[Sequence[int]],
    pad_id: int,
    logits_to_keep: torch.Tensor,
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Run continuation ``conts[r]`` after prefix ``rows[r]`` of ``state`` (each on its own copy of the prefix's
    cache), keeping the logits at continuation indices ``logits_to_keep`` (a tensor on ``state``'s device).

    Returns (the model's output, the attention mask over prefix and continuation, the continuations' position ids).
    """
    cache, ids, mask, position_ids = _continuation_inputs(state, rows, conts, pad_id)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=logits_to_keep,
    )
    return out, mask, position_ids


def token_chunks(items: list[Item], sizes: Sequence[int], max_tokens: int) -> list[list[Item]]:
    """Split items (with their token counts) into chunks whose padded size stays within ``max_tokens``."""
    chunks: list[list[Item]] = []
    current: list[Item] = []
    longest = 0
    for item, size in zip(items, sizes, strict=True):
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            chunks.append(current)
            current, longest = [], 0
        current.append(item)
        longest = max(longest, size)
    if current:
        chunks.append(current)
    return chunks


def group_batches(groups: Sequence[Group], batch_size: int) -> list[list[Group]]:
    """``groups`` in batches of ``batch_size`` (the last one may be shorter)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [list(groups[i : i + batch_size]) for i in range(0, len(groups), batch_size)]
