"""Where the adapter's host time per decode step goes: the batched tables, the per-layer views, the pre-hooks.

One decode step of a model with ``--layers`` layers, every one with its own factor (the worst case: no layers
share a table), batch ``--batch``, one token at position ``--position``. Each part is called ``--calls`` times in a
row, fastest of ``--repeats``, on one thread, the way the adapter calls it:

- ``tables``: the batched ``(cos, sin)`` of all distinct factors (:func:`rope_adapter.tables.layer_tables` without
  the split), the six tensor operations of transformers' rotary forward;
- ``views``: splitting them into each layer's own pair (two ``unbind`` calls);
- ``hook_path``: torch's forward pre-hook path in ``Module.__call__`` (a module with a do-nothing pre-hook against
  the same module without one), times the number of layers;
- ``hooks``: the adapter's pre-hook (:class:`rope_adapter.layer.LayerHook`, now only for a layer whose ``forward``
  another library replaced) picking each layer's pair;
- ``forward_wrapper``: what a per-layer wrapper of ``forward`` costs instead of the hook path (what the adapter
  does now: :class:`rope_adapter.layer.LayerForward`).

    .venv/bin/python benchmarks/own_work_breakdown.py --out benchmarks/results/own_work_breakdown
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rope_adapter.factors import cos_sin
from rope_adapter.layer import LayerHook
from rope_adapter.tables import layer_tables, make_plan

DEFAULTS = {"layers": 24, "batch": 1, "position": 1000, "head_dim": 64, "calls": 500, "repeats": 9}
"""The flags (all integers) and their defaults: Qwen2.5-0.5B's shape, one token at position 1000."""


def fastest(fn: Callable[[], Any], calls: int, repeats: int) -> float:
    """Microseconds a call, fastest of ``repeats`` runs of ``calls`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


class _Layer(nn.Module):
    def forward(self, x: torch.Tensor, position_embeddings: Any = None, **kwargs: Any) -> torch.Tensor:
        return x


def measure(layers: int, batch: int, position: int, head_dim: int, calls: int, repeats: int) -> dict[str, float]:
    factors = torch.linspace(0.9, 1.2, layers)
    plan = make_plan(factors, None, None)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    position_ids = torch.full((batch, 1), position)
    base = tuple(torch.randn(batch, 1, head_dim, dtype=torch.bfloat16) for _ in range(2))
    positions = position_ids[..., None].float()
    doubled = plan.scaled(inv_freq, "half")
    cos, sin = cos_sin(positions, doubled[:, None, None, :], 1.0, torch.bfloat16)
    pe = layer_tables(base, position_ids, inv_freq, 1.0, plan, "half")
    hooks = [LayerHook(i) for i in range(layers)]
    x = torch.zeros(1)
    kwargs = {"attention_mask": None, "use_cache": True, "cache_position": x}
    plain, hooked, wrapped = _Layer(), _Layer(), _Layer()
    hooked.register_forward_pre_hook(lambda m, a, k: (a, k), with_kwargs=True)
    original = wrapped.forward

    def wrapper(*args: Any, **kw: Any) -> Any:
        kw["position_embeddings"] = kw["position_embeddings"]
        return original(*args, **kw)

    wrapped.forward = wrapper

    def per_layer(module: nn.Module) -> Callable[[], None]:
        return lambda: module(x, position_embeddings=base, **kwargs)

    def run_hooks() -> None:
        for hook in hooks:
            hook(None, (), {"position_embeddings": pe})

    call_plain = fastest(per_layer(plain), calls, repeats)
    return {
        "tables": fastest(
            lambda: cos_sin(position_ids[..., None].float(), doubled[:, None, None, :], 1.0, torch.bfloat16),
            calls,
            repeats,
        ),
        "views": fastest(lambda: [base, *zip(cos.unbind(0), sin.unbind(0), strict=True)], calls, repeats),
        "hook_path": layers * (fastest(per_layer(hooked), calls, repeats) - call_plain),
        "hooks": fastest(run_hooks, calls, repeats),
        "forward_wrapper": layers * (fastest(per_layer(wrapped), calls, repeats) - call_plain),
        "whole_layer_tables": fastest(
            lambda: layer_tables(base, position_ids, inv_freq, 1.0, plan, "half"), calls, repeats
        ),
    }


def markdown(result: dict[str, Any]) -> str:
    us = result["microseconds"]
    rows = [
        ("the batched tables (six operations for all layers)", "tables"),
        ("each layer's own pair (two `unbind` calls)", "views"),
        ("torch's pre-hook path in `Module.__call__`, every layer", "hook_path"),
        ("the adapter's hooks picking each layer's pair", "hooks"),
        ("instead of the hook path: a per-layer forward wrapper", "forward_wrapper"),
        ("`layer_tables` as a whole (tables and views)", "whole_layer_tables"),
    ]
    s = result["settings"]
    lines = [
        "# The adapter's host time per decode step",
        "",
        f"{s['layers']} layers with distinct factors, batch {s['batch']}, one token at position {s['position']}, "
        f"head dim {s['head_dim']}; fastest of {s['repeats']} x {s['calls']} calls, 1 thread; "
        f"{result['machine']}.",
        "",
        "| part | us a step |",
        "|---|---|",
        *(f"| {label} | {us[key]:.1f} |" for label, key in rows),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = {
        "settings": {k: getattr(args, k) for k in DEFAULTS},
        "machine": f"{platform.machine()}, torch {torch.__version__}, Python {platform.python_version()}",
        "microseconds": measure(args.layers, args.batch, args.position, args.head_dim, args.calls, args.repeats),
    }
    spec = importlib.util.spec_from_file_location("result_files", Path(__file__).with_name("result_files.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_summary(args.out, result, markdown(result), indent=1)


if __name__ == "__main__":
    main()
