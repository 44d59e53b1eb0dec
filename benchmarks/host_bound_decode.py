"""The adapter's cost in a decode step bound by host time, the regime of small models on a GPU in eager PyTorch.

A 24-layer Llama with tiny matrices (hidden 64) on one CPU thread: its decode step is almost all Python and
operator dispatch, as a 0.5B model's is on a GPU, where each step is launched from the host. On the same weights in
memory (two copies of a model can time a few per cent apart on their own), interleaved, the order alternating:

- ``base``: the plain model;
- ``noop_prehooks``: the plain model with a do-nothing forward pre-hook on each decoder layer (torch's hook path);
- ``adapter``: the adapter as it is (each decoder layer's ``forward`` picks its own ``(cos, sin)``);
- ``adapter_prehooks``: the same adapter handing the pairs over through forward pre-hooks instead (the earlier
  mechanism, still the one used for a layer whose ``forward`` another library replaced);
- ``exported``: the folder ``rope-adapter export`` writes for the same factors, loaded as transformers loads it
  (a copy of the weights of its own, so this row also carries the few per cent two copies can differ by), every
  layer's pair computed in one batch per forward and picked by the layer's ``forward``, as the adapter's are;
- ``exported_layer_by_layer``: the same exported model with each layer computing its own pair (what an exported
  model does beyond the batch's memory bound, and did at every length in an earlier release).

Every factor differs (no shared tables). Fastest-of-N and median ratios against ``base``, and each variant timed
against itself (its odd against its even runs). Writes JSON and Markdown into the result folder.

    .venv/bin/python benchmarks/host_bound_decode.py --out benchmarks/results/host_bound_decode
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from machine_info import cpu_info, load_average
from peft import get_peft_model
from result_files import RESULTS, write_summary
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import rope_adapter
from rope_adapter.export import export_model
from rope_adapter.layer import LayerHook, remove_layer_hooks
from rope_adapter.standalone.modeling_mixin import LRS_TABLE_BUDGET

CPU_BUDGET = LRS_TABLE_BUDGET["cpu"]
VARIANTS = ("base", "noop_prehooks", "adapter", "adapter_prehooks", "exported", "exported_layer_by_layer")


class Variants:
    """One model whose state is switched before each timed run (the switch is not timed)."""

    def __init__(self, layers: int) -> None:
        config = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=32,
            vocab_size=256,
        )
        torch.manual_seed(0)
        self.model = LlamaForCausalLM(config).eval()
        self.factors = [1.0 + 0.02 * i for i in range(layers)]
        self.peft = None
        self.exported = exported_copy(self.model, self.factors)

    def __getitem__(self, name: str) -> torch.nn.Module:
        LRS_TABLE_BUDGET["cpu"] = 0 if name == "exported_layer_by_layer" else CPU_BUDGET
        if name.startswith("exported"):
            return self.exported
        if self.peft is not None:
            self.peft.unload()
            self.peft = None
        layers = self.model.model.layers
        for layer in layers:
            layer._forward_pre_hooks.clear()
            layer._forward_pre_hooks_with_kwargs.clear()
        if name == "noop_prehooks":
            for layer in layers:
                layer.register_forward_pre_hook(lambda module, args, kwargs: None, with_kwargs=True)
        elif name.startswith("adapter"):
            self.peft = get_peft_model(self.model, rope_adapter.LrsConfig(factors=self.factors)).eval()
            if name == "adapter_prehooks":
                remove_layer_hooks(layers)
                for i, layer in enumerate(layers):
                    layer.register_forward_pre_hook(LayerHook(i), with_kwargs=True)
        return self.model


def exported_copy(model: torch.nn.Module, factors: list[float]) -> torch.nn.Module:
    """``model`` with ``factors`` exported by ``rope-adapter export`` and loaded back (in-process classes)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model.save_pretrained(folder / "base")
        peft = get_peft_model(copy.deepcopy(model), rope_adapter.LrsConfig(factors=factors))
        peft.save_pretrained(folder / "adapter")
        export_model(folder / "base", folder / "adapter", folder / "exported", verify=False)
        return AutoModelForCausalLM.from_pretrained(folder / "exported").eval()


@torch.inference_mode()
def decode_seconds(model: torch.nn.Module, prompt: torch.Tensor, steps: int) -> float:
    """Seconds per decode step after ``prompt``, two warm-up steps not counted."""
    cache = model(input_ids=prompt, use_cache=True).past_key_values
    token = prompt[:, -1:]
    for _ in range(2):
        model(input_ids=token, cache=cache, use_cache=True)
    start = time.perf_counter()
    for _ in range(steps):
        model(input_ids=token, cache=cache, use_cache=True)
    return (time.perf_counter() - start) / steps


TITLE = "# Decode steps bound by host time (`benchmarks/host_bound_decode.py`)"


def markdown(results: dict) -> str:
    """The settings, the machine and one row per variant."""
    machine = results["machine"]
    lines = [
        TITLE,
        "",
        f"CPU: {machine.get('cpu_model', '?')}, one thread, torch {machine['torch']}; load "
        f"average {results['load_start']} at the start, {results['load_end']} at the end. A {results['layers']}-layer "
        f"Llama with hidden size 64 (every factor different), {results['steps']} decode steps a run after a "
        f"{results['prompt']}-token prompt, N = {results['repeats']} runs a variant on the same weights, interleaved.",
        "",
        "| variant | fastest step (us) | fastest-of-N ratio | median ratio | itself: odd / even runs |",
        "|---|---|---|---|---|",
    ]
    for name, row in results["variants"].items():
        lines.append(
            f"| {name} | {row['fastest_s'] * 1e6:,.0f} | {row['fastest_ratio']:.3f} | {row['median_ratio']:.3f} | "
            f"{row['split_half']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default, what in (
        ("--layers", 24, "decoder layers"),
        ("--repeats", 200, "timed runs per variant"),
        ("--steps", 10, "decode steps per run"),
        ("--prompt", 64, "prompt tokens before decoding"),
    ):
        parser.add_argument(flag, type=int, default=default, help=what)
    parser.add_argument("--out", type=Path, default=RESULTS / "host_bound_decode", help="result folder")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    variants = Variants(args.layers)
    prompt = torch.randint(0, 256, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    load_start = load_average()
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(args.repeats):
        for name in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            times[name].append(decode_seconds(variants[name], prompt, args.steps))
    base = times["base"]
    results = {
        "machine": cpu_info(),
        "load_start": load_start,
        "load_end": load_average(),
        "layers": args.layers,
        "repeats": args.repeats,
        "steps": args.steps,
        "prompt": args.prompt,
        "variants": {
            name: {
                "fastest_s": min(t),
                "fastest_ratio": min(t) / min(base),
                "median_ratio": statistics.median(t) / statistics.median(base),
                "split_half": min(t[1::2]) / min(t[0::2]),
                "seconds": t,
            }
            for name, t in times.items()
        },
    }
    write_summary(args.out, results, markdown(results), indent=1)


if __name__ == "__main__":
    main()
