"""Scoring any transformers causal LM on task samples: teacher-forced gold log-probs and greedy accuracy.

Built for a search that scores the same samples hundreds of times with different RoPE factors:

- :func:`prepare` tokenises once (a :class:`TokenizedTask`, built once per study); a trial only runs forward
  passes.
- Shared prefix: samples of one record with the same ``prefix`` (all gold positions of a KV-retrieval record)
  form a :class:`PrefixGroup`. The group's common tokens run through the model ONCE; the resulting KV cache
  (a ``DynamicCache``) is gathered along the batch dimension, one copy per member, and the members' remaining
  tokens (query + target) run against it in one batch.
- Batching: several groups (record sets) go through the prefix pass together, left-padded, with explicit
  ``position_ids`` so padding never shifts RoPE positions. Continuations are right-padded, so padding sits after
  every real token and cannot be attended to. The forward passes are :mod:`rope_adapter.scoring.prefix_cache`'s,
  which greedy generation shares.

Token boundaries: the shared tokens of a group are the longest common prefix of its members' tokenised full
strings (``prefix + query + target``), capped where the first target starts. Each continuation is the rest of
that same tokenisation, so the shared-prefix computation sees exactly the tokens of the plain full-sequence
computation, whatever the tokenizer merges across the prefix/query boundary. The target starts after the
longest common prefix of the tokenised prompt (``prefix + query``) and the tokenised full string; that is the
prompt's own tokenisation unless the tokenizer merges the prompt's last characters with the target's first
ones, in which case the merged token counts as the first target token (``TokenizedTask.exact_boundary`` is
False for that sample and a warning is given). A target starting at token 0 (no BOS, empty prompt, as for
perplexity) is scored from its second token.

Greedy decoding lives in :mod:`rope_adapter.scoring.generation`, the choice of k in
:mod:`rope_adapter.search.k_selection`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .logprobs import TokenLogprobs, token_margins
from .prefix_cache import PrefixState, continuation_pass, group_batches, model_device, prefix_pass, token_chunks
from .tasks.base import Sample, apply_chat_template

# --------------------------------------------------------------------------------------------------------------
# prepared inputs
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixGroup:
    """Samples whose first ``shared`` tokens are identical and computed once."""

    members: tuple[int, ...]
    shared: int


@dataclass
class TokenizedTask:
    """Samples tokenised once, grouped by shared prefix; reused by every trial of a study."""

    samples: list[Sample]
    full_ids: list[list[int]] = field(repr=False)  # prompt + target tokens, one row per answer form
    prompt_ids: list[list[int]] = field(repr=False)  # prompt tokens (what generation starts from), one per sample
    target_start: list[int] = field(repr=False)  # index in full_ids of the first scored target token, per row
    exact_boundary: list[bool] = field(repr=False)  # per row
    logprob_groups: list[PrefixGroup] = field(repr=False)
    generate_groups: list[PrefixGroup] | None = field(repr=False)
    pad_token_id: int = 0
    eos_token_ids: tuple[int, ...] = ()
    max_new_tokens: int = 16
    tokenizer: Any = field(default=None, repr=False)
    forms: list[tuple[int, ...]] | None = field(default=None, repr=False)
    """Rows of ``full_ids`` of each sample (its target first, then its ``alt_targets``); None: row i = sample i."""

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def positions(self) -> np.ndarray:
        """Gold position of each sample."""
        return np.array([s.position for s in self.samples])

    def target_ids(self, index: int) -> list[int]:
        """Scored target tokens of row ``index`` (sample ``index``'s main target for ``index < len(self)``)."""
        return self.full_ids[index][self.target_start[index] :]

    def token_counts(self) -> dict[str, int]:
        """Tokens a logprob trial runs with and without the shared prefix (for reports)."""
        plain = sum(len(ids) for ids in self.full_ids[: len(self.samples)])
        shared = sum(g.shared + sum(len(self.full_ids[i]) - g.shared for i in g.members) for g in self.logprob_groups)
        return {"separate": plain, "shared_prefix": shared}


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])


def _common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for j in range(n):
        token = first[j]
        if any(s[j] != token for s in seqs[1:]):
            return j
    return n


def _groups(samples: Sequence[Sample]) -> list[list[int]]:
    keyed: dict[tuple[str, str, bool], list[int]] = {}
    for i, s in enumerate(samples):
        keyed.setdefault((s.record_id, s.prefix, s.chat), []).append(i)
    return list(keyed.values())


def prepare(
    samples: Sequence[Sample],
    tokenizer: Any,
    *,
    chat_template: bool = False,
    system_prompt: str | None = None,
    max_new_tokens: int | None = None,
    generation_slack: int = 8,
) -> TokenizedTask:
    """Tokenise samples once and find the shared prefixes.

    Args:
        samples: from a task's ``build_samples``.
        tokenizer: the model's tokenizer.
        chat_template: wrap prompts in the tokenizer's chat template first (see ``tasks.apply_chat_template``).
        system_prompt: optional system message for the chat template.
        max_new_tokens: greedy generation length; default: longest target in tokens + ``generation_slack``.
        generation_slack: extra tokens beyond the longest target (a task's ``generation_slack``).
    """
    samples = list(samples)
    if not samples:
        raise ValueError("no samples to prepare")
    if chat_template:
        samples = apply_chat_template(samples, tokenizer, system_prompt)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    eos = tokenizer.eos_token_id
    eos_ids = tuple(eos) if isinstance(eos, list | tuple) else (() if eos is None else (int(eos),))

    full_ids, prompt_ids, starts, exact = [], [], [], []
    row_sample: list[int] = []  # the sample of each row: samples' main targets first, then the alternatives
    extra: list[tuple[int, str]] = [(i, t) for i, s in enumerate(samples) for t in s.targets[1:]]
    prompts = [_encode(tokenizer, s.prompt, not s.chat) for s in samples]
    for i, target in [(i, s.target) for i, s in enumerate(samples)] + extra:
        s = samples[i]
        prompt = prompts[i]
        full = _encode(tokenizer, s.prompt + target, not s.chat)
        start = _common_prefix_len([prompt, full])
        exact.append(start == len(prompt))
        start = max(start, 1)
        if start >= len(full):
            raise ValueError(f"the target {target!r} of sample {s.record_id!r} adds no token after the prompt")
        full_ids.append(full)
        starts.append(start)
        row_sample.append(i)
    prompt_ids = prompts  # one per sample; full_ids has one row per answer form
    forms = None
    if extra:
        forms = [[i] for i in range(len(samples))]
        for row in range(len(samples), len(row_sample)):
            forms[row_sample[row]].append(row)
        forms = [tuple(f) for f in forms]
    if not all(exact):
        warnings.warn(
            f"{exact.count(False)} of {len(exact)} targets merge with the end of their prompt when tokenised; "
            "their first scored token includes prompt characters",
            stacklevel=2,
        )

    logprob_groups: list[PrefixGroup] = []
    generate_groups: list[PrefixGroup] | None = []
    can_generate = all(len(p) >= 2 for p in prompt_ids)
    for members in _groups(samples):
        rows = [r for i in members for r in ((i,) if forms is None else forms[i])]
        shared = min(_common_prefix_len([full_ids[r] for r in rows]), min(starts[r] for r in rows))
        if shared >= 1:
            logprob_groups.append(PrefixGroup(tuple(rows), shared))
        else:  # nothing in common: each row on its own, everything before its target shared with itself
            logprob_groups.extend(PrefixGroup((r,), starts[r]) for r in rows)
        if can_generate:
            prompts = [prompt_ids[i] for i in members]
            shared = min(_common_prefix_len(prompts), min(len(p) for p in prompts) - 1)
            if shared >= 1:
                generate_groups.append(PrefixGroup(tuple(members), shared))
            else:
                generate_groups.extend(PrefixGroup((i,), len(prompt_ids[i]) - 1) for i in members)
    if not can_generate:
        generate_groups = None

    if max_new_tokens is None:
        max_new_tokens = max(len(f) - st for f, st in zip(full_ids, starts, strict=True)) + generation_slack
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    # Alike in shape only to prefix_cache.continuation_pass's model call (keyword arguments, one a line).
    return TokenizedTask(
        samples=samples,
        full_ids=full_ids,
        prompt_ids=prompt_ids,
        target_start=starts,
        exact_boundary=exact,
        logprob_groups=logprob_groups,
        generate_groups=generate_groups,
        pad_token_id=int(pad),
        eos_token_ids=eos_ids,
        max_new_tokens=int(max_new_tokens),
        tokenizer=tokenizer,
        forms=forms,
    )


# --------------------------------------------------------------------------------------------------------------
# teacher-forced gold log-probabilities
# --------------------------------------------------------------------------------------------------------------


@torch.inference_mode()
def token_logprobs(
    model: torch.nn.Module,
    task: TokenizedTask,
    *,
    shared_prefix: bool = True,
    batch_size: int = 4,
    max_batch_tokens: int = 4096,
    progress: bool = False,
) -> TokenLogprobs:
    """Teacher-forced log-probability of every target token.

    Args:
        model: any transformers causal LM (or a PEFT wrapper of one), in eval mode.
        task: from :func:`prepare`.
        shared_prefix: run each group's shared prefix once (default); False runs every sample's full sequence
            on its own (the plain reference computation).
        batch_size: prefix groups (record sets) per prefix forward pass.
        max_batch_tokens: bound on (continuations in a forward) x (longest continuation).
        progress: show a tqdm bar over prefix batches.

    Memory: each continuation in a forward pass gets its own copy of its prefix's KV cache, so a chunk holds
    about (continuations) x (prefix tokens) cached tokens; lower ``batch_size``/``max_batch_tokens`` for very
    long prefixes.
    """
    if not shared_prefix:
        return _token_logprobs_separate(model, task, progress)
    values: list[np.ndarray | None] = [None] * len(task.full_ids)
    greedy: list[np.ndarray | None] = [None] * len(task.full_ids)
    margins: list[np.ndarray | None] = [None] * len(task.full_ids)
    batches = group_batches(task.logprob_groups, batch_size)
    for batch in tqdm(batches, desc="gold log-prob", disable=not progress):
        state = prefix_pass(model, [task.full_ids[g.members[0]][: g.shared] for g in batch], task.pad_token_id)
        items = [(row, i, g.shared) for row, g in enumerate(batch) for i in g.members]
        sizes = [len(task.full_ids[i]) - shared for _, i, shared in items]
        for chunk in token_chunks(items, sizes, max_batch_tokens):
            _score_chunk(model, task, state, chunk, values, greedy, margins)
    if any(v is None for v in values):
        raise RuntimeError("internal error: a sample was not scored")
    return _collapse_forms(task, values, greedy, margins)


def _collapse_forms(task: TokenizedTask, values: list, greedy: list, margins: list) -> TokenLogprobs:
    """One row per sample: of its answer forms, the one greedy decoding writes (all tokens argmax) if any, else
    the most probable one (largest total log-prob)."""
    if task.forms is None:
        return TokenLogprobs(task.samples, list(values), list(greedy), margins=list(margins))
    chosen = []
    for rows in task.forms:
        exact = [r for r in rows if bool(greedy[r].all())]
        chosen.append(exact[0] if exact else max(rows, key=lambda r: float(values[r].sum())))
    return TokenLogprobs(
        task.samples,
        [values[r] for r in chosen],
        [greedy[r] for r in chosen],
        chosen,
        margins=[margins[r] for r in chosen],
    )


def _score_chunk(
    model: torch.nn.Module,
    task: TokenizedTask,
    state: PrefixState,
    chunk: Sequence[tuple[int, int, int]],
    values: list[np.ndarray | None],
    greedy: list[np.ndarray | None],
    margins: list[np.ndarray | None],
) -> None:
    conts = [task.full_ids[i][shared:] for _, i, shared in chunk]
    offsets = [task.target_start[i] - shared for _, i, shared in chunk]  # first target index in the continuation
    # logits at continuation index j predict token j + 1; index 0's token comes from the prefix pass
    lo = min(max(o - 1, 0) for o in offsets)
    hi = max(len(c) - 2 for c in conts)
    logprobs = None
    if hi >= lo:
        keep = torch.arange(lo, hi + 1, device=state.mask.device)
        out, _, _ = continuation_pass(model, state, [row for row, _, _ in chunk], conts, task.pad_token_id, keep)
        logprobs = out.logits.float().log_softmax(-1)
    for r, ((row, i, _), cont, offset) in enumerate(zip(chunk, conts, offsets, strict=True)):
        scores, hits, gaps = [], [], []
        if offset == 0:
            scores.append(state.last_logprobs[row, cont[0]])
            hits.append(state.last_logprobs[row].argmax() == cont[0])
            first_target = torch.tensor([cont[0]], device=state.last_logprobs.device)
            gaps.append(token_margins(state.last_logprobs[row][None], first_target)[0])
        first = max(offset, 1)
        if first < len(cont):
            assert logprobs is not None
            targets = torch.tensor(cont[first:], device=logprobs.device)
            rows = torch.arange(first - 1 - lo, len(cont) - 1 - lo, device=logprobs.device)
            scores.extend(logprobs[r, rows, targets].unbind())
            hits.extend((logprobs[r, rows].argmax(-1) == targets).unbind())
            gaps.extend(token_margins(logprobs[r, rows], targets).unbind())
        values[i] = torch.stack(scores).double().cpu().numpy()
        greedy[i] = torch.stack(hits).cpu().numpy()
        margins[i] = torch.stack(gaps).double().cpu().numpy()


def _token_logprobs_separate(model: torch.nn.Module, task: TokenizedTask, progress: bool) -> TokenLogprobs:
    device = model_device(model)
    values, greedy, margins = [], [], []
    for i in tqdm(range(len(task.full_ids)), desc="gold log-prob (separate)", disable=not progress):
        ids = torch.tensor([task.full_ids[i]], device=device)
        start = task.target_start[i]
        keep = ids.shape[1] - start + 1  # logits at start-1 .. end-1; the last one is dropped
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=keep).logits[0, :-1].float()
        logprobs = logits.log_softmax(-1)
        targets = ids[0, start:]
        values.append(logprobs[torch.arange(len(targets), device=device), targets].double().cpu().numpy())
        greedy.append((logprobs.argmax(-1) == targets).cpu().numpy())
        margins.append(token_margins(logprobs, targets).double().cpu().numpy())
    return _collapse_forms(task, values, greedy, margins)


def gold_logprob(
    model: torch.nn.Module,
    task: TokenizedTask,
    k: int | None = None,
    **kwargs: Any,
) -> np.ndarray:
    """Per-sample mean log-prob of the first ``k`` target tokens (all when None); kwargs go to :func:`token_logprobs`."""
    return token_logprobs(model, task, **kwargs).mean(k)
