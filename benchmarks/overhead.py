"""Cost of the LRS adapter at inference: the base model against the same model with an adapter, three sizes.

Random weights in the real shapes (no download): ``tiny`` (Llama, 12 layers, hidden 256), ``smollm2-135m``
(Llama, 30 layers, hidden 576) and ``qwen2.5-0.5b`` (Qwen2, 24 layers, hidden 896, the Coder-Instruct config).
The adapter has one factor per layer, all different (the first is 1). For each size:

- prefill at 1k and 4k tokens (only the last token's logits, as ``generate`` does),
- decode per token at batch 1 and 8 with a KV cache of 1k tokens (random keys and values: a step's cost does not
  depend on them; the cache is cropped back after every run),
- base and adapter runs interleaved (the order alternates), N runs each; reported: the fastest-of-N ratio
  (adapter's fastest over base's fastest), the median ratio and the spread (paired run-by-run ratios, each
  variant's slowest over its fastest), with the machine's load average before and after.

Then peak memory (fresh processes, SmolLM2 shape) and ``torch.compile`` on the tiny model (does it trace in one
graph, are the logits the eager adapter's, what it changes for prefill at 1k). Since a shared machine makes
whole-step timings noisy, each decode row also times the adapter's own work alone (its rotary wrapper against
the base rotary, one layer's hook; fastest of 2,000 calls) and gives the ratio that work adds to the base step's
CPU time. Writes JSON and Markdown into its result folder (default: benchmarks/results/overhead/overhead.json and .md):

    .venv/bin/python benchmarks/overhead.py [--sizes tiny,smollm2-135m,qwen2.5-0.5b] [--repeats N] [--threads 1]

On a GPU (``--device cuda``, ``--dtype bfloat16`` as models are served there) every timing waits for the device
(``torch.cuda.synchronize``) before reading the clock, peak memory is the CUDA allocator's peak in this process,
and the "CPU time" columns are the host thread's time (launching kernels and waiting for them).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from machine_info import cpu_info, load_average
from overhead_report import markdown
from peft import get_peft_model
from result_files import RESULTS, result_file, write_summary
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import rope_adapter
from rope_adapter import LrsConfig, files
from rope_adapter.layer import attach_layer
from rope_adapter.records import loads_json

REPEATS = {"tiny": (9, 5), "smollm2-135m": (5, 2), "qwen2.5-0.5b": (3, 1)}
"""Default runs per variant (prefill up to 1k and decode, prefill beyond 1k): what fits ~20 minutes on 1 core."""
CUDA_REPEATS = (30, 20)
"""Default runs per variant on a GPU, every size: a forward there takes milliseconds."""

DEVICE, DTYPE = torch.device("cpu"), torch.float32
"""Where the models run and their dtype (``--device``, ``--dtype``); set once by ``main`` (or a child process)."""

SIZES = {
    "tiny": (
        LlamaForCausalLM,
        LlamaConfig,
        dict(vocab_size=32000, hidden_size=256, intermediate_size=1024, num_hidden_layers=12, num_attention_heads=4)
        | dict(num_key_value_heads=4, head_dim=64, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    "smollm2-135m": (
        LlamaForCausalLM,
        LlamaConfig,
        dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9)
        | dict(num_key_value_heads=3, head_dim=64, rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
        | dict(tie_word_embeddings=True),
    ),
    "qwen2.5-0.5b": (
        Qwen2ForCausalLM,
        Qwen2Config,
        dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14)
        | dict(num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        | dict(tie_word_embeddings=False),
    ),
}


def build(size: str) -> torch.nn.Module:
    model_cls, config_cls, kwargs = SIZES[size]
    torch.manual_seed(0)
    return model_cls(config_cls(max_position_embeddings=32768, **kwargs)).eval().to(DEVICE, DTYPE)


def factors(num_layers: int) -> list[float]:
    return [1.0 + 0.5 * (i / (num_layers - 1)) ** 2 for i in range(num_layers)]  # all different, the first is 1


def with_adapter(model: torch.nn.Module) -> torch.nn.Module:
    return get_peft_model(model, LrsConfig(factors=factors(model.config.num_hidden_layers)))


def random_cache(config, batch: int, context: int) -> DynamicCache:
    cache = DynamicCache(config=config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    gen = torch.Generator().manual_seed(0)
    for layer in range(config.num_hidden_layers):
        shape = (batch, config.num_key_value_heads, context, head_dim)
        keys, values = (torch.randn(shape, generator=gen).to(DEVICE, DTYPE) for _ in range(2))
        cache.update(keys, values, layer)
    return cache


def clocks() -> tuple[float, float]:
    """Wall-clock time and this thread's CPU time (with one torch thread all the work runs on it; CPU time leaves
    out the time spent waiting for a core on a shared machine). On a GPU, after the device has finished its work."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)
    return time.perf_counter(), time.thread_time()


def since(start: tuple[float, float], per: int = 1) -> tuple[float, float]:
    wall, cpu = clocks()
    return (wall - start[0]) / per, (cpu - start[1]) / per


@torch.inference_mode()
def prefill_seconds(model, ids: torch.Tensor) -> tuple[float, float]:
    start = clocks()
    model(input_ids=ids, logits_to_keep=1, use_cache=False)
    return since(start)


@torch.inference_mode()
def decode_seconds(model, cache: DynamicCache, tokens: torch.Tensor, steps: int) -> tuple[float, float]:
    """Seconds per token (wall, CPU) over ``steps`` greedy steps from ``cache``, which is cropped back afterwards."""
    context = cache.get_seq_length()
    start = clocks()
    for _ in range(steps):
        tokens = model(input_ids=tokens, cache=cache, use_cache=True).logits[:, -1:].argmax(-1)
    seconds = since(start, steps)
    cache.crop(context - cache.get_seq_length())  # a negative count: remove the tokens just decoded
    return seconds


def summary(base: list[float], adapter: list[float]) -> dict:
    paired = sorted(a / b for a, b in zip(adapter, base, strict=True))
    return {
        "fastest_ratio": min(adapter) / min(base),
        "median_ratio": statistics.median(adapter) / statistics.median(base),
        "paired_ratio_min": paired[0],
        "paired_ratio_max": paired[-1],
        "base_spread": max(base) / min(base),
        "adapter_spread": max(adapter) / min(adapter),
        "base_s": base,
        "adapter_s": adapter,
    }


class OneModel:
    """Base and adapter on the same weights in memory: the adapter is injected before an adapter run and unloaded
    before a base run (neither is timed), so where the weights lie cannot differ between the two variants (two
    separately built copies measured a few per cent apart on this machine, either way)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.peft = model, None

    def __getitem__(self, name: str) -> torch.nn.Module:
        if name == "adapter" and self.peft is None:
            self.peft = with_adapter(self.model)
        elif name == "base" and self.peft is not None:
            self.model, self.peft = self.peft.unload(), None
        return self.peft if name == "adapter" else self.model

    def __iter__(self):
        return iter(("base", "adapter"))


def interleaved(run, variants, repeats: int) -> dict:
    """``run`` on each variant (``variants[name]``, for base and adapter) ``repeats`` times, the order
    alternating; summaries of wall and CPU time."""
    names = list(variants)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else list(reversed(names)):
            times[name].append(run(variants[name]))
    return {
        clock: summary([t[i] for t in times["base"]], [t[i] for t in times["adapter"]])
        for i, clock in enumerate(("wall", "cpu"))
    }


class Identity(torch.nn.Module):
    def forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
        return hidden_states


def fastest(fn, calls: int = 2000) -> float:
    """The fastest of many short calls: a busy machine rarely interrupts one, so this is the work itself."""
    best = float("inf")
    for _ in range(calls):
        start = clocks()[0]
        fn()
        best = min(best, clocks()[0] - start)
    return best


@torch.inference_mode()
def added_per_step(adapter, batch: int, position: int) -> dict:
    """The adapter's own work in one decode step, timed alone: its rotary wrapper against the base rotary, plus
    one decoder layer's pick of its pair (the module call through the adapter's per-layer ``forward`` against the
    same call without) times the layers."""
    layers = adapter.config.num_hidden_layers
    x = torch.zeros(batch, 1, adapter.config.hidden_size, device=DEVICE, dtype=DTYPE)
    pid = torch.tensor([[position]], device=DEVICE)
    wrapper = rope_adapter.find_rope_site(adapter).backbone.rotary_emb
    pe = wrapper(x, pid)
    plain, hooked = Identity(), Identity()
    attach_layer(hooked, layers - 1)
    rotary = fastest(lambda: wrapper(x, pid)) - fastest(lambda: wrapper.base_layer(x, pid))
    hook = fastest(lambda: hooked(x, position_embeddings=pe)) - fastest(lambda: plain(x, position_embeddings=pe))
    return {"rotary_s": rotary, "hook_s": hook, "added_s": rotary + layers * hook}


def measure_size(size: str, args: argparse.Namespace) -> dict:
    default = CUDA_REPEATS if DEVICE.type == "cuda" else REPEATS[size]
    short, long = args.repeats or default[0], args.long_repeats or default[1]
    variants = OneModel(build(size))
    assert rope_adapter.get_factors(variants["adapter"])[-1] == 1.5
    config = variants["base"].config
    vocab = config.vocab_size
    result: dict = {"load_before": load_average(), "layers": config.num_hidden_layers, "repeats": [short, long]}
    result["rows"] = {}
    for length in args.lengths:
        ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(length)).to(DEVICE)
        for name in variants:  # warm-up
            prefill_seconds(variants[name], ids[:, :512])
        repeats = short if length <= 1024 else long
        row = with_control(lambda m, ids=ids: prefill_seconds(m, ids), variants, repeats, args.control)
        result["rows"][f"prefill {length // 1024}k" if length % 1024 == 0 else f"prefill {length}"] = row
        print(f"{size} prefill {length}: {brief(row)}", flush=True)
    for batch in args.batches:
        cache = random_cache(config, batch, args.decode_context)
        tokens = torch.randint(0, vocab, (batch, 1), generator=torch.Generator().manual_seed(batch)).to(DEVICE)
        for name in variants:
            decode_seconds(variants[name], cache, tokens, 2)
        step = functools.partial(decode_seconds, cache=cache, tokens=tokens, steps=args.decode_steps)
        row = with_control(step, variants, short, args.control)
        row["added"] = added_per_step(variants["adapter"], batch, args.decode_context)
        row["added"]["estimated_ratio"] = 1 + row["added"]["added_s"] / min(row["cpu"]["base_s"])
        result["rows"][f"decode batch {batch}"] = row
        print(f"{size} decode batch {batch}: {brief(row)}", flush=True)
    result["load_after"] = load_average()
    return result


def with_control(run, variants: OneModel, repeats: int, control: bool) -> dict:
    """:func:`interleaved` base against adapter; with ``control``, then the same for base against base (an A/A run:
    the ratios a shared machine gives when nothing differs, the floor any adapter ratio is read against)."""
    row = interleaved(run, variants, repeats)
    if control:
        base = variants["base"]
        row["control"] = interleaved(run, {"base": base, "adapter": base}, repeats)
    return row


def brief(row: dict) -> str:
    wall, cpu = row["wall"], row["cpu"]
    control = row.get("control")
    return (
        f"base {min(wall['base_s']) * 1e3:.1f} ms, adapter {min(wall['adapter_s']) * 1e3:.1f} ms (fastest); "
        f"ratio fastest {wall['fastest_ratio']:.3f}, median {wall['median_ratio']:.3f}, "
        f"paired {wall['paired_ratio_min']:.3f}-{wall['paired_ratio_max']:.3f}; CPU time: fastest "
        f"{cpu['fastest_ratio']:.3f}, median {cpu['median_ratio']:.3f}"
    ) + (
        f"; A/A control: fastest {control['wall']['fastest_ratio']:.3f}, median {control['wall']['median_ratio']:.3f}"
        if control
        else ""
    )


def compile_check(args: argparse.Namespace) -> dict:
    """torch.compile on the tiny model: graphs and breaks, agreement with eager, prefill at 1k against eager."""
    from torch._dynamo.utils import counters

    ids = torch.randint(0, 32000, (1, 1024), generator=torch.Generator().manual_seed(7)).to(DEVICE)
    eager = {"base": build("tiny"), "adapter": with_adapter(build("tiny"))}
    compiled, info = {}, {}
    for name, model in eager.items():
        torch._dynamo.reset()
        counters.clear()
        compiled[name] = torch.compile(model.base_model.model if name == "adapter" else model)
        first = prefill_seconds(compiled[name], ids)[0]
        info[name] = {
            "first_call_s": first,
            "graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values())),
        }
    with torch.inference_mode():
        got = compiled["adapter"](input_ids=ids, logits_to_keep=1, use_cache=False).logits
        want = eager["adapter"](input_ids=ids, logits_to_keep=1, use_cache=False).logits
    run = prefill_seconds
    repeats = args.repeats or (CUDA_REPEATS if DEVICE.type == "cuda" else REPEATS["tiny"])[1]
    rows = {
        "compiled adapter vs compiled base": interleaved(lambda m: run(m, ids), compiled, repeats),
        "compiled base vs eager base": interleaved(
            lambda m: run(m, ids), {"base": eager["base"], "adapter": compiled["base"]}, repeats
        ),
        "compiled adapter vs eager adapter": interleaved(
            lambda m: run(m, ids), {"base": eager["adapter"], "adapter": compiled["adapter"]}, repeats
        ),
    }
    for label, row in rows.items():
        print(f"compile, prefill 1k, {label}: {brief(row)}", flush=True)
    return {"model": "tiny", "prefill": 1024, "max_abs_diff_vs_eager": float((got - want).abs().max()), **info} | {
        "rows": rows
    }


def _rss() -> tuple[int, int]:
    """This process's resident set and its peak since the last reset, in bytes (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return tuple(int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM"))


def memory_child(variant: str, length: int) -> None:
    """In a fresh process: resident memory before a prefill of ``length`` tokens and its peak during it (the peak
    is reset first, so building the model does not hide the prefill)."""
    model = build("smollm2-135m")
    if variant == "adapter":
        model = with_adapter(model)
    ids = torch.randint(0, 49152, (1, length), generator=torch.Generator().manual_seed(0))
    prefill_seconds(model, ids[:, :16])
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    before, _ = _rss()
    prefill_seconds(model, ids)
    print(files.dumps_json({"before_bytes": before, "peak_bytes": _rss()[1]}))


def cuda_peak(variant: str, length: int) -> dict:
    """On a GPU: the CUDA allocator's bytes in use before a prefill of ``length`` tokens and its peak during it."""
    model = build("smollm2-135m")
    if variant == "adapter":
        model = with_adapter(model)
    ids = torch.randint(0, 49152, (1, length), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    prefill_seconds(model, ids[:, :16])
    torch.cuda.reset_peak_memory_stats(DEVICE)
    before = torch.cuda.memory_allocated(DEVICE)
    prefill_seconds(model, ids)
    peak = torch.cuda.max_memory_allocated(DEVICE)
    del model
    torch.cuda.empty_cache()
    return {"before_bytes": before, "peak_bytes": peak}


def memory(lengths: list[int], args: argparse.Namespace) -> dict:
    out = {}
    for length in lengths:
        row = {}
        for variant in ("base", "adapter"):
            if DEVICE.type == "cuda":
                row[variant] = cuda_peak(variant, length)
                continue
            cmd = [
                sys.executable,
                __file__,
                "--child",
                variant,
                "--lengths",
                str(length),
                "--threads",
                str(args.threads),
            ]
            cmd += ["--dtype", args.dtype]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            last = done.stdout.strip().splitlines()[-1]
            row[variant] = loads_json(last, f"the memory child's stdout ({variant}, {length} tokens)", dict[str, int])
        row["ratio"] = row["adapter"]["peak_bytes"] / row["base"]["peak_bytes"]
        added = {v: (row[v]["peak_bytes"] - row[v]["before_bytes"]) / 2**20 for v in ("base", "adapter")}
        out[str(length)] = row
        print(
            f"peak RSS, SmolLM2 shape, prefill {length}: ratio {row['ratio']:.3f}; the prefill adds "
            f"{added['base']:.1f} MiB (base), {added['adapter']:.1f} MiB (adapter)",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, from {', '.join(SIZES)}")
    parser.add_argument("--lengths", default="1024,4096", help="prefill lengths in tokens")
    parser.add_argument("--batches", default="1,8", help="decode batch sizes")
    parser.add_argument("--repeats", type=int, help=f"runs per variant (prefill up to 1k, decode); {REPEATS}")
    parser.add_argument("--long-repeats", type=int, help="runs per variant for prefill beyond 1k")
    parser.add_argument("--decode-steps", type=int, default=8, help="tokens decoded per run")
    parser.add_argument("--decode-context", type=int, default=1024, help="KV cache length before decoding")
    parser.add_argument("--memory-lengths", default="128,1024", help="prefill lengths for peak memory ('' skips)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile check")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument(
        "--control", action="store_true", help="also time base against base (A/A) for every row: the noise floor"
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="model dtype")
    parser.add_argument("--out", type=Path, default=RESULTS / "overhead", help="result folder")
    parser.add_argument(
        "--markdown-only",
        action="store_true",
        help="measure nothing: write the Markdown page again from the JSON already in --out",
    )
    parser.add_argument("--child", choices=["base", "adapter"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.markdown_only:
        path = result_file(args.out, ".json")
        files.write_text(result_file(args.out, ".md"), markdown(loads_json(path.read_text(), path)))
        print(f"wrote {result_file(args.out, '.md')} from {path}")
        return
    torch.set_num_threads(args.threads)
    global DEVICE, DTYPE
    DEVICE, DTYPE = torch.device(args.device), getattr(torch, args.dtype)
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.batches = [int(x) for x in args.batches.split(",")]
    if args.child:
        memory_child(args.child, args.lengths[-1])
        return
    started = time.time()
    machine = cpu_info() | ({"gpu": torch.cuda.get_device_name(DEVICE)} if DEVICE.type == "cuda" else {})
    results: dict = {"machine": machine, "load_start": load_average(), "settings": vars(args) | {"out": None}}
    results["sizes"] = {size: measure_size(size, args) for size in args.sizes.split(",")}
    if args.memory_lengths:
        results["memory"] = memory([int(x) for x in args.memory_lengths.split(",")], args)
    if not args.no_compile:
        results["compile"] = compile_check(args)
    results["load_end"] = load_average()
    results["minutes"] = (time.time() - started) / 60
    results["target"] = {"fastest_ratio_max": 1.02}
    write_summary(args.out, results, markdown(results), indent=1)


if __name__ == "__main__":
    main()
