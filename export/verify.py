"""Verification of an exported folder: it is loaded in a fresh Python process without rope_adapter, and its
logits are compared with the adapter model's on a fixed probe."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from peft import PeftModel
from transformers import PreTrainedModel

from rope_adapter import files
from rope_adapter.json_types import JsonObject
from rope_adapter.records import read_json

from .staging import ExportVerificationError, die_with_parent

PROBE_SEED = 0

_CHILD = r"""
import json, sys, torch

class BlockRopeAdapter:  # the folder must load without rope_adapter
    def find_spec(self, name, path=None, target=None):
        if name == "rope_adapter" or name.startswith("rope_adapter."):
            raise ImportError("rope_adapter is blocked while checking an exported folder")
        return None

sys.meta_path.insert(0, BlockRopeAdapter())
from transformers import AutoModelForCausalLM

folder, work = sys.argv[1], sys.argv[2]
spec = json.load(open(f"{work}/probe.json"))
model = AutoModelForCausalLM.from_pretrained(
    folder, trust_remote_code=spec["trust_remote_code"], dtype=getattr(torch, spec["dtype"]),
    attn_implementation=spec["attn_implementation"],
).to(spec["device"]).eval()
ids = torch.load(f"{work}/input_ids.pt").to(spec["device"])
with torch.no_grad():
    logits = model(input_ids=ids).logits
torch.save(logits.cpu(), f"{work}/logits.pt")
json.dump({"class": type(model).__name__}, open(f"{work}/result.json", "w"), allow_nan=False)
"""


def probe_input_ids(vocab_size: int, length: int = 64, seed: int = PROBE_SEED) -> torch.Tensor:
    """A fixed pseudo-random ``[1, length]`` token sequence for comparing logits."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (1, length), generator=generator)


def verify_export(
    folder: str | os.PathLike, model: PreTrainedModel | PeftModel, *, atol: float | None = None, probe_length: int = 64
) -> float:
    """Load ``folder`` in a fresh Python process (without rope_adapter) and compare its logits with ``model``'s.

    ``model`` is the adapter model (a PeftModel with the LRS adapter active) the folder was exported from.
    Returns the largest absolute difference; raises ExportVerificationError when it exceeds ``atol`` (default
    1e-4 for float32 models, 1e-2 for half precision) or the folder does not load.
    """
    folder = Path(folder)
    config = read_json(folder / "config.json", JsonObject)
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    dtype = base.dtype
    if atol is None:
        atol = 1e-4 if dtype == torch.float32 else 1e-2
    text = base.config.get_text_config()
    length = min(probe_length, int(getattr(text, "max_position_embeddings", probe_length) or probe_length))
    ids = probe_input_ids(text.vocab_size, length)
    device = base.get_input_embeddings().weight.device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            expected = model(input_ids=ids.to(device)).logits.float().cpu()
    finally:
        model.train(was_training)
    with tempfile.TemporaryDirectory(prefix="rope-adapter-verify-") as work:
        spec = {
            "trust_remote_code": "auto_map" in config,
            "dtype": str(dtype).removeprefix("torch."),
            "attn_implementation": base.config._attn_implementation,
            "device": str(device),
        }
        files.write_json(Path(work, "probe.json"), spec)
        with files.writing(Path(work, "input_ids.pt")) as temp:
            torch.save(ids, temp)
        env = {
            **os.environ,
            "HF_MODULES_CACHE": str(Path(work, "modules")),  # keep the user's module cache clean
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
        }
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(folder), work],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            preexec_fn=die_with_parent if os.name == "posix" else None,
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
            raise ExportVerificationError(f"the exported folder {folder} does not load in a fresh process:\n{tail}")
        got = torch.load(Path(work, "logits.pt")).float()
        loaded_class = read_json(Path(work, "result.json"), dict[str, str])["class"]
    if got.shape != expected.shape:
        raise ExportVerificationError(
            f"the exported folder gives logits of shape {list(got.shape)}, the adapter {list(expected.shape)}"
        )
    diff = float((got - expected).abs().max())
    if not diff <= atol:
        raise ExportVerificationError(
            f"the exported folder, loaded as {loaded_class} in a fresh process, does not give the adapter's "
            f"logits: largest difference {diff:.3g} > {atol:g} on a {length}-token probe. Nothing was written; "
            f"please report this with the base model and adapter"
        )
    return diff
