"""vLLM against transformers on SmolLM2-135M-Instruct with per-layer factors: agreement and generation cost (CPU).

Run in vLLM's venv (``make test-vllm`` makes it):

    .venv-vllm/bin/python benchmarks/vllm_agreement.py [--prompts 200 500 1000] [--new-tokens 32] [--repeats 2]

The embedded SmolLM2 (fetched once from PyPI into the user cache) with an adapter whose factors rise from 0.8 to
1.6 over the 30 layers is exported (a ``llama_lrs`` folder) and served by vLLM through the rope-adapter plugin
(float32, eager, in this process). For prompts of the given lengths (key-value records, seeded):

- agreement: every prompt token's log-probability from vLLM (``prompt_logprobs``) against the PEFT adapter in
  transformers, and the greedy continuation; the same for the plain model against transformers;
- cost: greedy generation of ``--new-tokens`` tokens for each prompt, transformers (``generate``, KV cache, batch 1,
  one prompt after another) against vLLM (one prompt after another, and all prompts in one call), fastest of
  ``--repeats``; the ratio is transformers' time over vLLM's.

Writes ``benchmarks/results/vllm_agreement/vllm_agreement.json`` and ``.md`` (with the machine and its load).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
import vllm
from machine_info import cpu_info, load_average
from peft import get_peft_model
from result_files import RESULTS, write_summary
from vllm import LLM, SamplingParams

from rope_adapter import LrsConfig
from rope_adapter.embedded.convert import default_model_dir
from rope_adapter.embedded.loading import load_default_model
from rope_adapter.export import export_model


def prompt_ids(tokenizer, length: int, seed: int) -> list[int]:
    """About ``length`` tokens of key-value records ending in a question, as the project's retrieval task."""
    rng = random.Random(seed)
    records = []
    while len(tokenizer(" ".join(records)).input_ids) < length - 30:
        records.append(f'"{rng.getrandbits(64):016x}": "{rng.getrandbits(64):016x}",')
    key = records[len(records) // 2].split('"')[1]
    text = "Extract the value of the key below.\n{" + "\n".join(records) + f'}}\nKey: "{key}"\nValue:'
    return tokenizer(text).input_ids


def hf_logprobs(model, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.no_grad():
        return model(x).logits.float().log_softmax(-1)[0, :-1].gather(-1, x[0, 1:, None])[:, 0].double()


def hf_generate(model, ids: list[int], new_tokens: int) -> tuple[list[int], float]:
    x = torch.tensor([ids])
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
        )
    return out[0, len(ids) :].tolist(), time.perf_counter() - start


def vllm_side(folder: Path, prompts: list[list[int]], new_tokens: int, repeats: int) -> dict:
    llm = LLM(model=str(folder), dtype="float32", enforce_eager=True, seed=0, max_model_len=2048)
    logprob_params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    greedy = SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, temperature=0.0)
    result: dict = {"logprobs": [], "tokens": [], "seconds_each": [], "seconds_batched": None}
    for ids in prompts:
        out = llm.generate([{"prompt_token_ids": ids}], logprob_params, use_tqdm=False)[0]
        chosen = [lp[t].logprob for t, lp in zip(ids[1:], out.prompt_logprobs[1:], strict=True)]
        result["logprobs"].append(torch.tensor(chosen, dtype=torch.float64))
    llm.generate([{"prompt_token_ids": prompts[0][:64]}], greedy, use_tqdm=False)  # warm-up
    for ids in prompts:
        best = float("inf")
        for _ in range(repeats):
            llm.reset_prefix_cache()  # every run computes its prompt again, as transformers does
            start = time.perf_counter()
            out = llm.generate([{"prompt_token_ids": ids}], greedy, use_tqdm=False)[0]
            best = min(best, time.perf_counter() - start)
        result["tokens"].append(list(out.outputs[0].token_ids))
        result["seconds_each"].append(best)
    best = float("inf")
    for _ in range(repeats):
        llm.reset_prefix_cache()
        start = time.perf_counter()
        llm.generate([{"prompt_token_ids": ids} for ids in prompts], greedy, use_tqdm=False)
        best = min(best, time.perf_counter() - start)
    result["seconds_batched"] = best
    del llm
    gc.collect()
    return result


def hf_side(model, prompts: list[list[int]], new_tokens: int, repeats: int) -> dict:
    result: dict = {"logprobs": [hf_logprobs(model, ids) for ids in prompts], "tokens": [], "seconds_each": []}
    hf_generate(model, prompts[0][:64], 4)  # warm-up
    for ids in prompts:
        runs = [hf_generate(model, ids, new_tokens) for _ in range(repeats)]
        result["tokens"].append(runs[0][0])
        result["seconds_each"].append(min(seconds for _, seconds in runs))
    return result


def compare(served: dict, expected: dict) -> list[dict]:
    return [
        {
            "prompt_tokens": len(lp_e) + 1,
            "max_abs_logprob_diff": (lp_s - lp_e).abs().max().item(),
            "mean_abs_logprob_diff": (lp_s - lp_e).abs().mean().item(),
            "greedy_tokens_equal": sum(a == b for a, b in zip(t_s, t_e, strict=True)),
            "greedy_tokens": len(t_e),
        }
        for lp_s, lp_e, t_s, t_e in zip(
            served["logprobs"], expected["logprobs"], served["tokens"], expected["tokens"], strict=True
        )
    ]


def cost(served: dict, expected: dict) -> dict:
    hf_total, vllm_total = sum(expected["seconds_each"]), sum(served["seconds_each"])
    return {
        "transformers_seconds_each": expected["seconds_each"],
        "vllm_seconds_each": served["seconds_each"],
        "vllm_seconds_batched": served["seconds_batched"],
        "ratio_one_at_a_time": hf_total / vllm_total,
        "ratio_batched": hf_total / served["seconds_batched"],
    }


def markdown(results: dict) -> str:
    s = results["settings"]
    lines = [
        "# vLLM against transformers: SmolLM2-135M-Instruct with per-layer factors",
        "",
        f"Command: `.venv-vllm/bin/python benchmarks/vllm_agreement.py --prompts {' '.join(map(str, s['prompts']))} "
        f"--new-tokens {s['new_tokens']} --repeats {s['repeats']}`; vLLM {s['vllm']}, transformers {s['transformers']}, "
        f"torch {s['torch']}, float32, eager, CPU. Factors {s['factors'][0]} .. {s['factors'][-1]} over "
        f"{len(s['factors'])} layers.",
        "",
        "## Agreement (prompt log-probs, greedy tokens)",
        "",
        "| model | prompt tokens | max abs diff | mean abs diff | greedy tokens equal |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rows in (
        ("per-layer export vs adapter", results["per_layer"]),
        ("plain vs transformers", results["plain"]),
    ):
        lines += [
            f"| {name} | {r['prompt_tokens']} | {r['max_abs_logprob_diff']:.2e} | {r['mean_abs_logprob_diff']:.2e} | "
            f"{r['greedy_tokens_equal']}/{r['greedy_tokens']} |"
            for r in rows
        ]
    lines += [
        "",
        f"The factors move the adapter's prompt log-probs from the base model's by up to {results['factor_effect']:.2f}.",
        "",
        f"## Cost (greedy generation of {s['new_tokens']} tokens, fastest of {s['repeats']}, seconds)",
        "",
        "| prompt tokens | transformers (adapter) | vLLM (export) | ratio |",
        "|---:|---:|---:|---:|",
    ]
    c = results["cost"]
    for row, hf, vl in zip(results["per_layer"], c["transformers_seconds_each"], c["vllm_seconds_each"], strict=True):
        lines.append(f"| {row['prompt_tokens']} | {hf:.2f} | {vl:.2f} | {hf / vl:.2f} |")
    lines += [
        "",
        f"All prompts one after another: transformers takes {c['ratio_one_at_a_time']:.2f}x vLLM's time; vLLM given "
        f"all prompts in one call ({c['vllm_seconds_batched']:.2f} s): {c['ratio_batched']:.2f}x.",
        "",
        f"Machine: {results['machine'].get('cpu_model', '?')}, {results['machine']['cpus_visible']} CPUs visible, "
        f"load average before {results['load_before']}, after {results['load_after']} (other work shared the CPUs: "
        f"the ratio is the measure, not the seconds).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, nargs="+", default=[200, 500, 1000], help="prompt lengths (tokens)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("runs/vllm_agreement"), help="where the export is written")
    parser.add_argument("--out", type=Path, default=RESULTS / "vllm_agreement", help="result folder")
    args = parser.parse_args(argv)
    load_before = load_average()
    model, tokenizer = load_default_model()
    n = model.config.num_hidden_layers
    factors = [round(0.8 + 0.8 * i / (n - 1), 4) for i in range(n)]
    peft_model = get_peft_model(model, LrsConfig(factors=factors))
    folder = args.work / "smollm2-lrs"
    if not folder.is_dir():
        export_model(peft_model, out=folder, tokenizer=tokenizer)
    prompts = [prompt_ids(tokenizer, length, seed) for seed, length in enumerate(args.prompts)]
    adapter = hf_side(peft_model, prompts, args.new_tokens, args.repeats)
    with peft_model.disable_adapter():
        base = {"logprobs": [hf_logprobs(peft_model, ids) for ids in prompts]}
        base["tokens"] = [hf_generate(peft_model, ids, args.new_tokens)[0] for ids in prompts]
    served = vllm_side(folder, prompts, args.new_tokens, args.repeats)
    plain = vllm_side(default_model_dir(), prompts, args.new_tokens, 1)
    results = {
        "settings": {
            "prompts": args.prompts,
            "new_tokens": args.new_tokens,
            "repeats": args.repeats,
            "factors": factors,
            "vllm": vllm.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "per_layer": compare(served, adapter),
        "plain": compare(plain, base),
        "factor_effect": max(
            (a - b).abs().max().item() for a, b in zip(adapter["logprobs"], base["logprobs"], strict=True)
        ),
        "cost": cost(served, adapter),
        "machine": cpu_info(),
        "load_before": load_before,
        "load_after": load_average(),
    }
    write_summary(args.out, results, markdown(results), indent=1)


if __name__ == "__main__":
    main()
