"""Tiny random-initialised decoder models and a byte-level tokenizer for tests (no downloads)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

ARCHITECTURES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt_neox"]
VOCAB = 300  # 256 bytes + specials, see byte_tokenizer()


def tiny_sizes(num_layers: int = 4) -> dict[str, Any]:
    """The sizes and special token ids of every tiny model (the byte tokenizer's vocabulary, 4 heads of 16)."""
    return {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 512,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
    }


def sharpen_queries_and_keys(model: torch.nn.Module) -> torch.nn.Module:
    """Multiply the query and key projections by 4 (in place) so that RoPE changes the logits visibly."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and any(k in name for k in ("q_proj", "k_proj", "query_key_value", "qkv")):
                p.mul_(4.0)
    return model


def tiny_config(arch: str = "llama", num_layers: int = 4, **overrides):
    """A small config of the given model_type whose RoPE visibly matters (long max positions, theta 100)."""
    kw = tiny_sizes(num_layers)
    if arch == "gpt_neox":
        kw.pop("num_key_value_heads")
        kw.pop("head_dim")
        kw["rotary_pct"] = 0.5
    if arch == "phi3":
        kw.pop("head_dim")
        kw["partial_rotary_factor"] = 0.5
    if arch == "gemma3_text":
        kw["layer_types"] = ["full_attention" if (i + 1) % 2 == 0 else "sliding_attention" for i in range(num_layers)]
        kw["sliding_window"] = 64
    if arch == "gemma2":
        kw["sliding_window"] = 64
    kw.update(overrides)
    config = AutoConfig.for_model(arch, **kw)
    # a small theta makes every factor change the logits visibly
    params = config.rope_parameters
    if arch == "gemma3_text":
        for lt in params:
            params[lt]["rope_theta"] = 100.0 if lt == "sliding_attention" else 500.0
    else:
        params["rope_theta"] = 100.0
    return config


def tiny_model(arch: str = "llama", num_layers: int = 4, seed: int = 0, **overrides) -> PreTrainedModel:
    """A random-init causal LM in eval mode, with weights large enough that RoPE changes the logits."""
    torch.manual_seed(seed)
    config = tiny_config(arch, num_layers, **overrides)
    config._attn_implementation = "eager" if arch.startswith("gemma") else "sdpa"
    return sharpen_queries_and_keys(AutoModelForCausalLM.from_config(config)).eval()


def chat_tokenizer(role_open: str, role_close: str, turn_end: str) -> PreTrainedTokenizerFast:
    """The byte tokenizer with a chat template: each message ``{role_open}ROLE{role_close}\nCONTENT{turn_end}\n``,
    then, for a generation prompt, ``{role_open}assistant{role_close}\n``."""
    tok = byte_tokenizer()
    message = f"{role_open}{{{{ m['role'] }}}}{role_close}\n{{{{ m['content'] }}}}{turn_end}\n"
    prompt = f"{role_open}assistant{role_close}\n"
    tok.chat_template = (
        f"{{% for m in messages %}}{message}{{% endfor %}}{{% if add_generation_prompt %}}{prompt}{{% endif %}}"
    )
    return tok


def save_model_folder(model: PreTrainedModel, folder: Path) -> Path:
    """``model`` and the byte tokenizer saved in ``folder`` (a model folder, what --model takes); ``folder``."""
    model.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (ids 0..2 special, bytes from 3) that needs no vocabulary file."""
    # sorted: ByteLevel.alphabet() comes from a hash set, in another order in every process, which made the ids
    # (so the prompts' tokens, the scores and any finite-difference check) differ from one test run to the next
    byte_vocab = {ch: i + 3 for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **byte_vocab}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", padding_side="left"
    )


def native_linear(base: PreTrainedModel, factor: float) -> PreTrainedModel:
    """The same weights under transformers' own linear RoPE scaling with ``factor``."""
    config = copy.deepcopy(base.config)
    params = config.rope_parameters
    targets = params.values() if all(isinstance(v, dict) for v in params.values()) else [params]
    for p in targets:
        previous = float(p.get("factor", 1.0)) if p.get("rope_type") == "linear" else 1.0
        p.update(rope_type="linear", factor=previous * factor)
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(base.state_dict())
    return model.eval()


def weights_in(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The parameters cast to ``dtype`` and the buffers (``inv_freq``) left in float32, as
    ``from_pretrained(..., dtype=dtype)`` loads a model (``model.to(dtype)`` would round ``inv_freq`` too)."""
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


@contextlib.contextmanager
def capture_position_embeddings(layers: torch.nn.ModuleList) -> Iterator[dict[int, tuple[torch.Tensor, ...]]]:
    """The ``(cos, sin)`` each decoder layer really passes on to its attention, filled in by the forwards run inside
    the ``with`` block: recorded by a pre-hook on every child module of the layer that is called with
    ``position_embeddings`` (the first call of each layer counts)."""
    seen: dict[int, tuple[torch.Tensor, ...]] = {}
    handles = []
    for idx, layer in enumerate(layers):
        for child in layer.children():

            def hook(module, args, kwargs, idx=idx):
                if kwargs.get("position_embeddings") is not None and idx not in seen:
                    seen[idx] = tuple(kwargs["position_embeddings"])

            handles.append(child.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


class FreshLogits:
    """``fresh(factors)``: the logits on ``ids`` of a fresh adapter model on a copy of ``base`` with ``factors``,
    memoised (property tests ask for few distinct factor tuples, many times)."""

    def __init__(self, base: PreTrainedModel, ids: torch.Tensor) -> None:
        self.base, self.ids = base, ids
        self.seen: dict[tuple[float, ...], torch.Tensor] = {}

    def __call__(self, factors: tuple[float, ...]) -> torch.Tensor:
        if factors not in self.seen:
            from peft import get_peft_model

            from rope_adapter import LrsConfig

            model = get_peft_model(copy.deepcopy(self.base), LrsConfig(factors=list(factors)))
            with torch.no_grad():
                self.seen[factors] = model(self.ids).logits
        return self.seen[factors]
