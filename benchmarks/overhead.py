"""Cost of the LRS adapter at inference: base model vs adapter (non-uniform factors), measured in one run.

A SmolLM2-135M-shaped Llama (30 layers, hidden 576, 9/3 heads, head_dim 64), random weights:
- prefill latency at 1k, 4k and 16k tokens (only the last token's logits, as `generate` does),
- decode latency per token with a KV cache,
- peak memory (peak RSS of a fresh process doing the 16k prefill; peak CUDA memory on a GPU).
Timings interleave base and adapter runs so machine noise hits both; the median is reported.
Prints the ratios and writes JSON (default benchmarks/results/overhead.json).

    .venv/bin/python benchmarks/overhead.py [--lengths 1024,4096,16384] [--repeats 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from machine_info import environment
from peft import get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

import rope_adapter
from rope_adapter import LrsConfig, files

LAYERS = 30


def smollm2_shaped(max_positions: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=LAYERS,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        max_position_embeddings=max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


def factors() -> list[float]:
    return [1.0 + 0.5 * (i / (LAYERS - 1)) ** 2 for i in range(LAYERS)]  # non-uniform, all distinct but the first


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@torch.inference_mode()
def prefill_seconds(model, ids: torch.Tensor, device: str) -> float:
    sync(device)
    start = time.perf_counter()
    model(input_ids=ids, logits_to_keep=1, use_cache=False)
    sync(device)
    return time.perf_counter() - start


@torch.inference_mode()
def decode_seconds_per_token(model, ids: torch.Tensor, steps: int, device: str) -> float:
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    sync(device)
    return (time.perf_counter() - start) / steps


def peak_memory_child(variant: str, length: int, device: str) -> None:
    """Run in a fresh process: one prefill of ``length`` tokens; print peak memory in bytes."""
    import resource

    model = smollm2_shaped(max(length, 8192)).to(device)
    if variant == "adapter":
        model = get_peft_model(model, LrsConfig(factors=factors()))
    ids = torch.randint(0, 49152, (1, length), generator=torch.Generator().manual_seed(0)).to(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.max_memory_allocated()
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    prefill_seconds(model, ids, device)
    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(files.dumps_json({"peak_bytes": peak, "before_bytes": before}))


def peak_memory(variant: str, length: int, device: str) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--lengths", str(length), "--device", device]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096,16384", help="prefill lengths in tokens")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per variant and length (median)")
    parser.add_argument("--decode-steps", type=int, default=64, help="decoded tokens for the per-token latency")
    parser.add_argument("--decode-context", type=int, default=1024, help="prompt length before decoding")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "overhead.json")
    parser.add_argument("--child", choices=["base", "adapter"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.child:
        peak_memory_child(args.child, lengths[-1], args.device)
        return

    base = smollm2_shaped(max(max(lengths), 8192)).to(args.device)
    adapter = get_peft_model(smollm2_shaped(max(max(lengths), 8192)).to(args.device), LrsConfig(factors=factors()))
    assert rope_adapter.get_factors(adapter)[-1] == factors()[-1]
    variants = {"base": base, "adapter": adapter}
    results: dict = {"prefill": {}, "decode": {}, "memory": {}}
    for length in lengths:
        ids = torch.randint(0, 49152, (1, length), generator=torch.Generator().manual_seed(length)).to(args.device)
        for model in variants.values():  # warm-up
            prefill_seconds(model, ids[:, : min(length, 256)], args.device)
        times: dict[str, list[float]] = {k: [] for k in variants}
        repeats = args.repeats if length <= 4096 else max(1, args.repeats // 2)
        for r in range(repeats):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                times[name].append(prefill_seconds(variants[name], ids, args.device))
        med = {k: statistics.median(v) for k, v in times.items()}
        results["prefill"][str(length)] = {
            "base_s": med["base"],
            "adapter_s": med["adapter"],
            "ratio": med["adapter"] / med["base"],
            "runs": times,
        }
        print(
            f"prefill {length:>6} tokens: base {med['base']:.3f}s  adapter {med['adapter']:.3f}s  "
            f"ratio {med['adapter'] / med['base']:.3f}",
            flush=True,
        )

    ctx = torch.randint(0, 49152, (1, args.decode_context), generator=torch.Generator().manual_seed(1)).to(args.device)
    dec: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(args.repeats):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            dec[name].append(decode_seconds_per_token(variants[name], ctx, args.decode_steps, args.device))
    dmed = {k: statistics.median(v) for k, v in dec.items()}
    results["decode"] = {
        "context": args.decode_context,
        "steps": args.decode_steps,
        "base_s_per_token": dmed["base"],
        "adapter_s_per_token": dmed["adapter"],
        "ratio": dmed["adapter"] / dmed["base"],
        "runs": dec,
    }
    print(
        f"decode per token: base {dmed['base'] * 1e3:.2f}ms  adapter {dmed['adapter'] * 1e3:.2f}ms  "
        f"ratio {dmed['adapter'] / dmed['base']:.3f}",
        flush=True,
    )

    del base, adapter, variants
    mem_len = max(lengths)
    mem = {name: peak_memory(name, mem_len, args.device) for name in ("base", "adapter")}
    results["memory"] = {
        "length": mem_len,
        "base_peak_bytes": mem["base"]["peak_bytes"],
        "adapter_peak_bytes": mem["adapter"]["peak_bytes"],
        "ratio": mem["adapter"]["peak_bytes"] / mem["base"]["peak_bytes"],
        "measure": "peak CUDA allocation" if args.device.startswith("cuda") else "peak RSS of a fresh process",
    }
    print(
        f"peak memory at {mem_len} tokens: base {mem['base']['peak_bytes'] / 2**20:.0f} MiB  adapter "
        f"{mem['adapter']['peak_bytes'] / 2**20:.0f} MiB  ratio {results['memory']['ratio']:.3f}",
        flush=True,
    )

    results["targets"] = {"latency_ratio_max": 1.03, "memory_ratio_max": 1.05}
    results["environment"] = {"device": args.device, **environment()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(args.out, results, indent=2, newline=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
