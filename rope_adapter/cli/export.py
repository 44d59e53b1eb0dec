"""`rope-adapter export --model BASE --adapter ADAPTER --out DIR`: base model + adapter as one model folder."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from rope_adapter.cli import output_path
from rope_adapter.export import export_model
from rope_adapter.numbers import cli_float

DTYPES = ("auto", "float32", "bfloat16", "float16")


HELP = "write base model + adapter as one standalone model folder"
DESCRIPTION = (
    "Write a complete model folder (weights, tokenizer, generation config, chat template) whose "
    "config.json carries the adapter's per-layer factors. One factor for all layers on a default/linear-RoPE "
    "model (or one per layer type on Gemma3-style models) becomes transformers' own linear RoPE scaling; other "
    "factors a new model_type with its code beside the weights (load with trust_remote_code=True, or after "
    "`import rope_adapter`). The folder is reloaded in a fresh process and its logits compared with "
    "the adapter's before it appears under --out."
)


EPILOG = """\
examples:
  rope-adapter export --model smollm2-135m-instruct --adapter runs/smollm2/adapter --out smollm2-lrs
  rope-adapter export --model org/model-7b --adapter org/model-7b-lrs --out model-7b-lrs --dtype bfloat16 \\
      --max-shard-size 5GB

Then: rope-adapter card smollm2-lrs (the model card to read), rope-adapter push smollm2-lrs --repo org/smollm2-lrs.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="ID_OR_PATH", help="base model: Hub id, folder, or alias")
    p.add_argument("--adapter", required=True, metavar="ADAPTER", help="LRS adapter folder or Hub repo id")
    p.add_argument("--out", required=True, type=output_path, metavar="DIR", help="folder to create")
    p.add_argument("--overwrite", action="store_true", help="replace --out when it exists and is not empty")
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip the fresh-process logits check")
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="dtype to load and save the weights in")
    p.add_argument("--max-shard-size", default=None, help="largest weight file, e.g. 5GB (save_pretrained's)")
    p.add_argument("--atol", type=cli_float, default=None, help="largest logit difference the check accepts")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(format="%(message)s")  # root stays at WARNING; our progress lines at INFO
    logging.getLogger("rope_adapter.export").setLevel(logging.INFO)
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    result = export_model(
        args.model,
        args.adapter,
        args.out,
        overwrite=args.overwrite,
        verify=args.verify,
        dtype=dtype,
        max_shard_size=args.max_shard_size,
        atol=args.atol,
    )
    print(f"wrote {result.path}")
    print(f"format: {result.format} (model_type {result.model_type}): {result.reason}")
    factors = result.factors
    print(f"factors: {len(factors)} layers, min {min(factors):.4f}, max {max(factors):.4f}")
    if result.max_abs_diff is None:
        print("verification: skipped (--no-verify)")
    else:
        print(f"verification: fresh-process logits equal the adapter's (largest difference {result.max_abs_diff:.3g})")
    print("files: " + ", ".join(result.files))
    load = "AutoModelForCausalLM.from_pretrained(DIR" + (
        ", trust_remote_code=True)" if result.format != "native" else ")"
    )
    print(f"load with: {load.replace('DIR', repr(str(Path(result.path))))}")
    return 0
