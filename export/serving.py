"""What vLLM makes of a native export's length, said in the export itself.

vLLM reads a linear RoPE factor f as a context extension: it serves a folder with ``rope_type: linear`` and factor
f at most f x its maximum length, and its linear RoPE table holds only that many positions. For a factor above 1
that is what linear scaling is for; for a uniform factor below 1 (a native export of an adapter whose factors are
all equal and below 1) vLLM serves the model shorter than transformers does, and a longer ``--max-model-len``
(which vLLM allows only with ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``) would read past the end of that table. Such an
export records the length vLLM will serve in ``lrs_export.json`` (key ``vllm``) and logs it. Reads the folder's
JSON files only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from rope_adapter.json_types import JsonValue
from rope_adapter.records import read_json
from rope_adapter.rope_settings import RopeParameters, rotaries

logger = logging.getLogger(__name__)

LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""The config keys vLLM 0.32 derives a model's maximum length from (the smallest; model_max_length wins)."""

UNSCALED_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
"""RoPE types whose factor vLLM does not multiply the maximum length by."""


class VllmNote(TypedDict):
    """What ``lrs_export.json`` says (key ``vllm``) of a folder vLLM serves shorter than its full length."""

    full_max_model_len: int
    vllm_max_model_len: int
    note: str


def _rope_dicts(rope: JsonValue) -> list[RopeParameters]:
    """Each rotary's settings in a config.json's ``rope_parameters`` as found (anything else: none)."""
    return [r for r in rotaries(rope) if r] if isinstance(rope, dict) else []


def vllm_lengths(
    config: Mapping[str, JsonValue], tokenizer_config: Mapping[str, JsonValue] | None
) -> tuple[int, int] | None:
    """``(full, served)``: the maximum length before vLLM applies the RoPE factor, and the one it serves by
    default. None when the config names no length."""
    lengths = [config[key] for key in LENGTH_KEYS if isinstance(config.get(key), int)]
    if not lengths:
        return None
    full = config["model_max_length"] if isinstance(config.get("model_max_length"), int) else min(lengths)
    tokenizer_max = (tokenizer_config or {}).get("model_max_length")
    if isinstance(tokenizer_max, int):
        full = min(full, tokenizer_max)
    factor = 1.0
    if "gemma3" not in str(config.get("model_type")):
        for rope in _rope_dicts(config.get("rope_parameters")):
            if rope.get("rope_type", rope.get("type")) not in UNSCALED_TYPES:
                factor = rope.get("factor", factor) or 1.0
    return full, int(full * factor)


def note_vllm_length(folder: Path) -> VllmNote | None:
    """For a folder vLLM serves shorter than its full length: log what vLLM will do and return the note for
    ``lrs_export.json`` (else None). Writes nothing."""
    config = read_json(folder / "config.json", dict)
    tokenizer_path = folder / "tokenizer_config.json"
    tokenizer_config = read_json(tokenizer_path, dict) if tokenizer_path.is_file() else None
    lengths = vllm_lengths(config, tokenizer_config)
    if lengths is None or lengths[1] >= lengths[0]:
        return None
    full, served = lengths
    note = (
        f"vLLM serves this folder with at most {served} tokens, not {full}: it reads the linear RoPE factor below 1 "
        f"as a shorter context and its linear RoPE table holds only {served} positions (do not raise "
        f"--max-model-len past it); transformers uses all {full}"
    )
    logger.warning("%s", note)
    return {"full_max_model_len": full, "vllm_max_model_len": served, "note": note}
