"""`rope-adapter info PATH`: an adapter's (or exported model's) factors and provenance."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypedDict

from rope_adapter import read_adapter_factors
from rope_adapter.export import read_exported_factors
from rope_adapter.export.reading import ExportedFactors
from rope_adapter.files import dumps_json
from rope_adapter.json_types import JsonObject
from rope_adapter.rope_settings import RopeSettings

HELP = "print an adapter's factors and provenance"
DESCRIPTION = (
    "Print the per-layer factors, the base model they were made for and how they were found. "
    "PATH is an adapter folder, a Hub repo id, or a folder written by `rope-adapter export`."
)


EPILOG = """\
examples:
  rope-adapter info runs/smollm2/adapter
  rope-adapter info org/smollm2-lrs --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="adapter folder, Hub repo id, or exported model folder")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


class AdapterInfo(TypedDict):
    """What `info` shows of an adapter (``--json`` prints it)."""

    kind: str  # "adapter"
    path: str
    base_model: str | None
    base_model_type: str | None
    num_layers: int | None
    head_dim: int | None
    base_rope_parameters: RopeSettings | None
    factors: list[float]
    provenance: JsonObject | None  # how the factors were found, as the adapter records it


def describe(path: str) -> AdapterInfo | ExportedFactors:
    """What `info` shows: an adapter's :class:`AdapterInfo`, or an exported folder's factors
    (:class:`~rope_adapter.export.reading.ExportedFactors`: the same keys and the export's own)."""
    folder = Path(path)
    if folder.is_dir() and (folder / "config.json").is_file() and not (folder / "adapter_config.json").is_file():
        return read_exported_factors(folder)
    config, tensor = read_adapter_factors(path)
    return {
        "kind": "adapter",
        "path": str(path),
        "base_model": config.base_model_name_or_path,
        "base_model_type": config.base_model_type,
        "num_layers": config.num_layers,
        "head_dim": config.head_dim,
        "base_rope_parameters": config.base_rope_parameters,
        "factors": tensor.tolist(),
        "provenance": config.provenance,
    }


def run(args: argparse.Namespace) -> int:
    info = describe(args.path)
    if args.json:
        print(dumps_json(info, where=args.path, indent=2))
        return 0
    print(f"{info['kind']}: {info['path']}")
    print(f"base model: {info.get('base_model')} ({info.get('base_model_type')}, {info.get('num_layers')} layers)")
    print(f"base RoPE: {dumps_json(info.get('base_rope_parameters'), where=args.path)}")
    factors = info["factors"]
    print(f"factors: min {min(factors):.4f}  max {max(factors):.4f}  mean {sum(factors) / len(factors):.4f}")
    for i, f in enumerate(factors):
        print(f"  layer {i:3d}  {f:.6f}  {'#' * max(1, round((f - min(1.0, min(factors))) * 40))}")
    prov = info.get("provenance")
    print(
        "provenance: " + (dumps_json(prov, where=args.path, field="provenance", indent=2) if prov else "none recorded")
    )
    return 0
