"""``export_model``: write a complete model folder that carries an LRS adapter's factors, loadable without PEFT.

The folder holds the base weights (safetensors, sharded like ``save_pretrained``), the base model's tokenizer
files, chat template, generation config and licence files copied unchanged, a ``config.json`` that carries the
factors, and ``lrs_export.json`` (what was exported from what, and how it was checked). See ``plan.py`` for when
the factors become transformers' own RoPE settings and when a new model_type with generated code.

Every input is checked before any weight is loaded or written (:mod:`.sources`); the folder is built under a temporary name next
to ``out``, reloaded in a fresh Python process and compared with the adapter's logits, and only then renamed.
"""

from __future__ import annotations

import copy
import fnmatch
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import torch
from peft import PeftModel
from transformers import PreTrainedConfig, PreTrainedModel

import rope_adapter
from rope_adapter import files, find_rope_site, get_factors
from rope_adapter.json_types import JsonObject
from rope_adapter.records import read_json
from rope_adapter.rope_settings import RopeSettings
from rope_adapter.standalone import (
    CodegenError,
    names_for_model,
    register_lrs_model_type,
    wrap_rope_parameters,
)
from rope_adapter.standalone.codegen import write_code
from rope_adapter.writable import blank_path_reason

from .plan import CUSTOM_CODE, NATIVE, ExportPlan, plan_export
from .reading import SIDECAR_NAME
from .serving import note_vllm_length
from .sidecar import ExportSidecar
from .sources import (
    COPIED_FILE_PATTERNS,
    ExportSource,
    source_from_model,
    source_from_path,
    source_from_peft_model,
)
from .staging import (
    ExportError,
    check_export_options,
    make_temporary,
    publish,
    release_owner_mark,
    remove_stale_temporaries,
    sigterm_as_interrupt,
)
from .verify import verify_export

logger = logging.getLogger(__name__)


@dataclass
class ExportResult:
    """What :func:`export_model` wrote."""

    path: Path
    format: str  # "native" or "custom-code"
    model_type: str  # model_type in config.json, e.g. "llama_lrs" or "llama"
    factors: list[float]
    reason: str  # why this format
    files: list[str] = field(default_factory=list)
    max_abs_diff: float | None = None  # fresh-process logits vs adapter logits; None when not verified


# ---------------------------------------------------------------------------------------------- writing


def _factors(source: ExportSource) -> list[float]:
    """The active factors: the adapter config's numbers when they are what the float32 tensor holds."""
    tensor = torch.tensor(get_factors(source.peft_model, source.adapter_name), dtype=torch.float32)
    configured = source.config.factors
    if isinstance(configured, list) and torch.equal(torch.tensor(configured, dtype=torch.float32), tensor):
        return [float(f) for f in configured]
    return tensor.tolist()


def _native_rejection(config: PreTrainedConfig, rope_parameters: RopeSettings | None) -> str | None:
    """Why the base config class refuses ``rope_parameters`` (Phi3 takes only longrope), or None."""
    data = config.to_dict()
    data["rope_parameters"] = rope_parameters
    try:
        type(config).from_dict(data)
    except Exception as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return lines[-1] if lines else type(exc).__name__
    return None


def _base_state_dict(base: PreTrainedModel, rotary_name: str) -> dict[str, torch.Tensor]:
    """The base model's state dict without the adapter: no factor tensor, rotary keys unwrapped."""
    wrapped = f"{rotary_name}.base_layer."
    state = {}
    for key, value in base.state_dict().items():
        if key.startswith(f"{rotary_name}.lrs_factors"):
            continue
        state[rotary_name + "." + key.removeprefix(wrapped) if key.startswith(wrapped) else key] = value
    return state


def _write_config(
    folder: Path, plan: ExportPlan, rope_parameters: RopeSettings, factors: list[float], source: ExportSource
) -> str:
    path = folder / "config.json"
    config = read_json(path, JsonObject)
    base_type = config["model_type"]
    if plan.format == NATIVE:
        config["rope_parameters"] = plan.rope_parameters
    else:
        names = names_for_model(source.peft_model.get_base_model())
        config.update(
            model_type=names.model_type,
            architectures=[names.model_class],
            auto_map=names.auto_map,
            rope_parameters=wrap_rope_parameters(copy.deepcopy(rope_parameters)),
            lrs_factors=factors,
            lrs_rotary_layout=find_rope_site(source.peft_model.get_base_model()).layout,
            lrs_base_model_type=base_type,
            lrs_provenance=source.config.provenance,
        )
    files.write_json(path, config, indent=2, sort_keys=True)
    return config["model_type"]


def _copy_base_files(base_folder: Path | None, folder: Path, tokenizer: Any) -> list[str]:
    copied = []
    if base_folder is not None:
        for item in sorted(base_folder.iterdir()):
            if item.is_file() and any(fnmatch.fnmatch(item.name, p) for p in COPIED_FILE_PATTERNS):
                files.copy_file(item, folder / item.name)
                copied.append(item.name)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    elif not any(name.startswith("tokenizer") for name in copied):
        logger.warning("no tokenizer files found next to the base model: pass tokenizer= to include them")
    return copied


class _SaveOptions(TypedDict, total=False):  # what the export passes to the base model's save_pretrained
    state_dict: dict[str, torch.Tensor]
    max_shard_size: int | str
    save_original_format: bool


def _sidecar(
    source: ExportSource, plan: ExportPlan, rope_parameters: RopeSettings, factors: list[float]
) -> ExportSidecar:
    config = source.config
    return {
        "format": plan.format,
        "reason": plan.reason,
        "rope_adapter_version": rope_adapter.__version__,
        "base_model": source.base_name,
        "base_model_type": config.base_model_type,
        "adapter": source.adapter_ref,
        "num_layers": config.num_layers,
        "head_dim": config.head_dim,
        "rotary_dim": config.rotary_dim,
        "base_rope_parameters": rope_parameters,
        "factors": factors,
        "provenance": config.provenance,
        "verification": None,
    }


# ------------------------------------------------------------------------------------------------ export


def export_model(
    model_or_path: str | os.PathLike | PreTrainedModel | PeftModel,
    adapter: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
    verify: bool = True,
    dtype: torch.dtype | str | None = None,
    tokenizer: Any = None,
    max_shard_size: int | str | None = None,
    atol: float | None = None,
    probe_length: int = 64,
) -> ExportResult:
    """Write base model + LRS adapter as one standalone model folder ``out``.

    Args:
        model_or_path: the base model (Hub id, local folder, or the alias ``smollm2-135m-instruct``), a loaded
            base ``PreTrainedModel`` (given back unchanged), or a ``PeftModel`` with an LRS adapter.
        adapter: the adapter folder or Hub repo id; for a ``PeftModel`` the adapter name (default: the active one).
        out: the folder to create. An existing non-empty folder is refused unless ``overwrite``; a folder inside
            the base model's is always refused.
        verify: reload the folder in a fresh process and compare logits with the adapter (raises
            ExportVerificationError on mismatch; nothing is written then).
        dtype: dtype to load a base model given by path (default: the checkpoint's).
        tokenizer: a tokenizer to save into the folder, when the base model's folder has none to copy.
        max_shard_size: passed to ``save_pretrained``.
        atol: verification tolerance on the logits (see `rope_adapter.export.verify_export`).
        probe_length: tokens in the verification's probe input.

    Uniform factors on a default/linear-RoPE model (or factors constant per layer type on a Gemma3-style model)
    become native linear ``rope_parameters``; other factors a new model_type ``<base>_lrs`` whose code is
    written beside the weights (``trust_remote_code=True``, or ``import rope_adapter``).
    """
    if out is None:
        raise TypeError("export_model() needs out=, the folder to write")
    if (why := blank_path_reason(out, "out")) is not None:
        raise ExportError(why)
    atol, max_shard_size, probe_length = check_export_options(atol, max_shard_size, probe_length)
    out = Path(out).expanduser().absolute()
    if isinstance(model_or_path, PeftModel):
        source = source_from_peft_model(model_or_path, None if adapter is None else str(adapter), out, overwrite)
    elif adapter is None:
        raise ExportError("give the LRS adapter to export (folder or Hub repo id)")
    elif isinstance(model_or_path, PreTrainedModel):
        source = source_from_model(model_or_path, adapter, out, overwrite)
    else:
        source = source_from_path(model_or_path, adapter, out, overwrite, dtype)
    try:
        with sigterm_as_interrupt():
            return _export(source, out, overwrite, verify, tokenizer, max_shard_size, atol, probe_length)
    finally:
        source.restore()


def _export(
    source: ExportSource,
    out: Path,
    overwrite: bool,
    verify: bool,
    tokenizer: Any,
    max_shard_size: int | str | None,
    atol: float | None,
    probe_length: int,
) -> ExportResult:
    base = source.peft_model.get_base_model()
    site = find_rope_site(base)
    factors = _factors(source)
    rope_parameters = copy.deepcopy(dict(base.config.get_text_config().rope_parameters or {}))
    plan = plan_export(rope_parameters, site.layer_types, factors)
    if plan.format == NATIVE and (rejected := _native_rejection(base.config.get_text_config(), plan.rope_parameters)):
        plan = ExportPlan(CUSTOM_CODE, None, f"{site.model_type} does not take linear RoPE scaling ({rejected})")
    if plan.format == CUSTOM_CODE:
        try:
            names = names_for_model(base)
        except CodegenError as exc:
            raise ExportError(f"these factors need custom code ({plan.reason}), but {exc}") from exc
        register_lrs_model_type(names.base_model_type)
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_temporaries(out):
        logger.info("removed %s, left by an earlier export that was killed", stale)
    tmp = make_temporary(out)
    try:
        logger.info("writing %s (%s: %s)", out, plan.format, plan.reason)
        save_kwargs: _SaveOptions = {"state_dict": _base_state_dict(base, site.rotary_name)}
        if max_shard_size is not None:
            save_kwargs["max_shard_size"] = max_shard_size
        if plan.format == CUSTOM_CODE:  # keep transformers' internal weight names: the new model_type has no
            save_kwargs["save_original_format"] = False  # checkpoint conversion mapping to undo on load
        base.save_pretrained(tmp, **save_kwargs)
        model_type = _write_config(tmp, plan, rope_parameters, factors, source)
        _copy_base_files(source.base_folder, tmp, tokenizer)
        if plan.format == CUSTOM_CODE:
            write_code(tmp, names, rope_adapter.__version__)
        sidecar = _sidecar(source, plan, rope_parameters, factors)
        if plan.format == NATIVE and (vllm_note := note_vllm_length(tmp)) is not None:
            sidecar["vllm"] = vllm_note  # vLLM would serve it shorter: what it does, how to keep the length
        diff = None
        if verify:
            diff = verify_export(tmp, source.peft_model, atol=atol, probe_length=probe_length)
            sidecar["verification"] = {"max_abs_diff": diff, "probe_tokens": probe_length, "dtype": str(base.dtype)}
        files.write_json(tmp / SIDECAR_NAME, sidecar, indent=2)
        release_owner_mark(tmp)
        publish(tmp, out, overwrite)
    except OSError as exc:  # a full or read-only disk while writing
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportError(f"writing the export to {out} failed: {exc}; nothing was written under --out") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(
        path=out,
        format=plan.format,
        model_type=model_type,
        factors=factors,
        reason=plan.reason,
        files=sorted(p.name for p in out.iterdir()),
        max_abs_diff=diff,
    )
