"""Tiny model folders for the export tests: a base model folder with tokenizer, chat template and generation config,
an adapter folder, and the logits and file digests the tests compare."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from peft import PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, GenerationConfig

from rope_adapter import LrsConfig
from rope_adapter.export import probe_input_ids

from .tiny_models import byte_tokenizer, tiny_model

NON_UNIFORM = [1.0, 1.5, 2.5, 4.0]
CHAT_TEMPLATE = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
ATOL = 1e-5


def attn(arch: str) -> str:
    return "eager" if arch.startswith("gemma") else "sdpa"


def make_base(folder: Path, arch: str = "llama", **overrides) -> Path:
    """A tiny base model folder with the byte tokenizer, a chat template and a generation config."""
    model = tiny_model(arch, **overrides)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, max_new_tokens=7)
    model.save_pretrained(folder)
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


def make_adapter(folder: Path, factors, arch: str = "llama", **overrides) -> Path:
    peft_model = get_peft_model(tiny_model(arch, **overrides), LrsConfig(factors=factors, provenance={"test": arch}))
    peft_model.save_pretrained(folder)
    return folder


def adapter_logits(base: Path, adapter: Path, arch: str, ids: torch.Tensor) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(base, attn_implementation=attn(arch)).eval()
    with torch.no_grad():
        return PeftModel.from_pretrained(model, adapter)(ids).logits


def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(ids).logits


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


IDS = probe_input_ids(300, 48)
