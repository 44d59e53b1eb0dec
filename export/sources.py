"""Where an export starts: the base model and the LRS adapter, resolved and checked before any weight is written.

An export takes a base model by path or Hub id (:func:`source_from_path`), a loaded base model and an adapter
(:func:`source_from_model`, which gives the model back as it was), or a ``PeftModel`` (:func:`source_from_peft_model`).
Each checks the output folder, the adapter (a local folder whole, safetensors included) and the base model's config
before anything heavy is loaded, and returns an :class:`ExportSource`.
"""

from __future__ import annotations

import copy
import logging
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from peft import PeftModel, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedConfig, PreTrainedModel

from rope_adapter import LrsConfig, load_lrs_config
from rope_adapter.api import check_adapter_folder
from rope_adapter.embedded.loading import resolve_model_path
from rope_adapter.errors import first_line
from rope_adapter.writable import unwritable_reason

from .staging import ExportError
from .weights import check_weight_files

logger = logging.getLogger(__name__)


COPIED_FILE_PATTERNS = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab*",
    "merges.txt",
    "*.tiktoken",
    "*.model",
    "chat_template*",
    "generation_config.json",
    "LICENSE*",
    "NOTICE*",
    "USE_POLICY*",
)
"""Files of the base model folder copied unchanged into the export (tokenizer, chat template, licence)."""


@dataclass
class ExportSource:
    """The adapter to export, attached to its base model, and what the export records about both."""

    peft_model: PeftModel
    adapter_name: str
    config: LrsConfig
    base_name: str | None  # base model id or path, for the record
    base_folder: Path | None  # local folder holding the base model's tokenizer files etc.
    adapter_ref: str | None
    restore: Callable[[], None] = lambda: None


# ------------------------------------------------------------------------------------------------ checks


def local_dir(ref: str | os.PathLike | None) -> Path | None:
    """``ref`` as an absolute folder when it names a local folder, else None (a Hub id, a file, nothing)."""
    if ref is None:
        return None
    path = Path(ref).expanduser()
    return path.resolve() if path.is_dir() else None


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it."""
    return path == folder or folder in path.parents


def check_output_folder(out: Path, overwrite: bool, *, base: Path | None = None, adapter: Path | None = None) -> None:
    """Refuse an ``out`` that is non-empty (unless ``overwrite``), a file, or tangled with the inputs."""
    out = out.resolve()
    if (why := unwritable_reason(out, "--out")) is not None:
        raise ExportError(why)
    if base is not None and inside(out, base):
        raise ExportError(f"--out {out} is inside the base model folder {base}: write the export somewhere else")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file: give a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"--out {out} exists and is not empty: choose a new folder or pass --overwrite")
        for name, folder in (("base model", base), ("adapter", adapter)):
            if folder is not None and inside(folder, out):
                raise ExportError(f"--overwrite would delete {out}, which holds the {name} {folder}")


def check_adapter_fits(config: LrsConfig, base_config: PreTrainedConfig) -> None:
    """Check an adapter config against a base model config without loading weights.

    Builds the model skeleton on the meta device and binds the adapter to it, so the checks are exactly those of
    ``PeftModel.from_pretrained`` (layer count, head size, rotary size, RoPE settings). Raises
    ``AdapterMismatchError`` or ``UnsupportedModelError``.
    """
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(base_config)
    get_peft_model(skeleton, copy.deepcopy(config))


def load_base_config(ref: str) -> PreTrainedConfig:
    """The base model's config; a clear :class:`ExportError` when it cannot be read."""
    try:
        return AutoConfig.from_pretrained(ref)
    except (OSError, ValueError) as exc:
        first = first_line(exc)
        raise ExportError(f"cannot read the base model config of {ref}: {first}") from exc


# ----------------------------------------------------------------------------------------------- sources


def source_from_path(
    model: str | os.PathLike, adapter: str | os.PathLike, out: Path, overwrite: bool, dtype: Any
) -> ExportSource:
    """The base model loaded from ``model`` (a folder, Hub id or embedded alias) with the adapter attached."""
    base_ref = resolve_model_path(model)
    base_folder = local_dir(base_ref)
    check_output_folder(out, overwrite, base=base_folder, adapter=local_dir(adapter))
    config = checked_adapter(adapter)
    base_config = load_base_config(base_ref)
    check_builtin(base_config)
    check_adapter_fits(config, base_config)
    if base_folder is not None:
        check_weight_files(base_folder)
    logger.info("loading %s", base_ref)
    try:
        base = AutoModelForCausalLM.from_pretrained(base_ref, dtype="auto" if dtype is None else dtype)
    except (OSError, ValueError, RuntimeError) as exc:  # the loaders' own errors: one line, naming the model
        first = first_line(exc)
        raise ExportError(f"cannot load the base model {os.fspath(model)!r}: {first}") from None
    base.eval()
    with warnings.catch_warnings():
        # the adapter was checked against this base above; PEFT's note that the base's path differs from the
        # adapter's `base_model_name_or_path` (a Hub id vs a local copy of it) only confuses
        warnings.filterwarnings("ignore", message=".*base_model_name_or_path.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        peft_model = PeftModel.from_pretrained(base, os.fspath(adapter))
    return ExportSource(
        peft_model=peft_model,
        adapter_name="default",
        config=peft_model.peft_config["default"],
        base_name=os.fspath(model),
        base_folder=base_folder or hub_files(base_ref),
        adapter_ref=os.fspath(adapter),
    )


def source_from_model(model: PreTrainedModel, adapter: str | os.PathLike, out: Path, overwrite: bool) -> ExportSource:
    """A loaded base model with the adapter attached; :attr:`ExportSource.restore` gives it back as it was."""
    base_ref = getattr(model.config, "_name_or_path", None) or None
    base_folder = local_dir(base_ref)
    check_output_folder(out, overwrite, base=base_folder, adapter=local_dir(adapter))
    config = checked_adapter(adapter)
    check_builtin(model.config)
    check_adapter_fits(config, model.config)
    trainable = {name: p.requires_grad for name, p in model.named_parameters()}
    peft_model = PeftModel.from_pretrained(model, os.fspath(adapter))

    def restore() -> None:  # give the caller back the model as it was
        peft_model.unload()
        for name, p in model.named_parameters():
            p.requires_grad_(trainable.get(name, p.requires_grad))

    return ExportSource(
        peft_model=peft_model,
        adapter_name="default",
        config=peft_model.peft_config["default"],
        base_name=base_ref,
        base_folder=base_folder or hub_files(base_ref),
        adapter_ref=os.fspath(adapter),
        restore=restore,
    )


def source_from_peft_model(model: PeftModel, adapter_name: str | None, out: Path, overwrite: bool) -> ExportSource:
    """The LRS adapter ``adapter_name`` (default: the active one) of a ``PeftModel``, made active until restored."""
    name = adapter_name or model.active_adapter
    config = model.peft_config.get(name)
    if not isinstance(config, LrsConfig):
        raise ExportError(
            f"adapter {name!r} of this PeftModel is {type(config).__name__ if config else 'missing'}, not an LRS "
            f"adapter; adapters: {sorted(model.peft_config)}"
        )
    base = model.get_base_model()
    base_ref = getattr(base.config, "_name_or_path", None) or config.base_model_name_or_path
    base_folder = local_dir(base_ref)
    check_output_folder(out, overwrite, base=base_folder)
    check_builtin(base.config)
    previous = model.active_adapter
    if name != previous:
        model.set_adapter(name)

    def restore() -> None:
        if name != previous:
            model.set_adapter(previous)

    return ExportSource(
        peft_model=model,
        adapter_name=name,
        config=config,
        base_name=base_ref,
        base_folder=base_folder or hub_files(base_ref),
        adapter_ref=None,
        restore=restore,
    )


def checked_adapter(adapter: str | os.PathLike) -> LrsConfig:
    """The adapter's config; a local folder is checked whole (safetensors too) before any weight is loaded."""
    folder = local_dir(adapter)
    return check_adapter_folder(folder) if folder is not None else load_lrs_config(adapter)


def check_builtin(config: PreTrainedConfig) -> None:
    """Refuse a base model that is itself an LRS export or runs custom code: only built-in models are exported."""
    if config.model_type.endswith("_lrs"):
        raise ExportError(
            f"the base model is already an exported LRS model (model_type {config.model_type!r}): export from "
            f"its base model instead"
        )
    if getattr(config, "auto_map", None) or not type(config).__module__.startswith("transformers."):
        raise ExportError(
            f"the base model ({type(config).__name__}, model_type {config.model_type!r}) uses custom code; "
            f"only transformers' built-in models can be exported"
        )


def hub_files(ref: str | None) -> Path | None:
    """The base model's small files (tokenizer, templates, licence) from the Hub cache, when ``ref`` is a repo id."""
    if not ref or Path(ref).expanduser().exists():
        return None
    try:
        return Path(snapshot_download(ref, allow_patterns=list(COPIED_FILE_PATTERNS)))
    except Exception as exc:
        logger.warning("cannot fetch the tokenizer files of %s (%s): the export will lack them", ref, exc)
        return None
