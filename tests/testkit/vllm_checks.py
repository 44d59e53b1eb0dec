"""What the vLLM tests (tests/vllm/) share: one engine at a time, prompt log-probs and greedy tokens from vLLM and
from transformers, the same prompt for both. Imports vLLM: only tests/vllm uses it."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from vllm import LLM, SamplingParams
from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

NEW_TOKENS = 8


@dataclass
class Run:
    """Log-probability of each prompt token after the first, and the greedy continuation."""

    logprobs: torch.Tensor
    tokens: list[int]


@contextmanager
def engine(folder: Path, **kwargs) -> Iterator[LLM]:
    """An in-process vLLM engine on ``folder`` in float32 (eager, as on every CPU), freed on exit."""
    llm = LLM(model=str(folder), dtype="float32", enforce_eager=True, seed=0, **{"max_model_len": 512, **kwargs})
    try:
        yield llm
    finally:  # shut down now: an engine collected later would tear down the next one's process groups
        llm.llm_engine.engine_core.shutdown()
        del llm
        cleanup_dist_env_and_memory()
        gc.collect()


def vllm_run(llm: LLM, prompt: Sequence[int], new_tokens: int = NEW_TOKENS) -> Run:
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, prompt_logprobs=0, ignore_eos=True)
    out = llm.generate([{"prompt_token_ids": list(prompt)}], params, use_tqdm=False)[0]
    chosen = [lp[tok].logprob for tok, lp in zip(prompt[1:], out.prompt_logprobs[1:], strict=True)]
    return Run(torch.tensor(chosen, dtype=torch.float64), list(out.outputs[0].token_ids))


def hf_run(model: torch.nn.Module, prompt: Sequence[int], new_tokens: int = NEW_TOKENS) -> Run:
    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        logprobs = model(ids).logits.float().log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False)
    return Run(logprobs.double(), out[0, len(prompt) :].tolist())


def max_diff(a: Run, b: Run) -> float:
    return (a.logprobs - b.logprobs).abs().max().item()


def same_greedy(vllm: Run, hf: Run) -> bool:
    """vLLM ran on past the end-of-sequence token (ignore_eos); transformers stops there."""
    return len(hf.tokens) > 0 and vllm.tokens[: len(hf.tokens)] == hf.tokens
