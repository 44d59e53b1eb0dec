"""``export_model``: write a complete model folder that carries an LRS adapter's factors, loadable without PEFT.

The folder holds the base weights (safetensors, sharded like ``save_pretrained``), the base model's tokenizer
files, chat template, generation config and licence files copied unchanged, a ``config.json`` that carries the
factors, and ``lrs_export.json`` (what was exported from what, and how it was checked). See ``plan.py`` for when
the factors become transformers' own RoPE settings and when a new model_type with generated code.

Every input is checked before any weight is loaded or written; the folder is built under a temporary name next
to ``out``, reloaded in a fresh Python process and compared with the adapter's logits, and only then renamed.
"""

from __future__ import annotations

import copy
import fnmatch
import logging
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import torch
from huggingface_hub import snapshot_download
from peft import PeftModel, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedConfig, PreTrainedModel

import rope_adapter
from rope_adapter import LrsConfig, files, find_rope_site, get_factors, load_lrs_config
from rope_adapter.api import check_adapter_folder
from rope_adapter.embedded.loading import resolve_model_path
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
from rope_adapter.writable import blank_path_reason, unwritable_reason

from .plan import CUSTOM_CODE, NATIVE, ExportPlan, plan_export
from .reading import SIDECAR_NAME
from .serving import note_vllm_length
from .sidecar import ExportSidecar
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
class ExportResult:
    """What :func:`export_model` wrote."""

    path: Path
    format: str  # "native" or "custom-code"
    model_type: str  # model_type in config.json, e.g. "llama_lrs" or "llama"
    factors: list[float]
    reason: str  # why this format
    files: list[str] = field(default_factory=list)
    max_abs_diff: float | None = None  # fresh-process logits vs adapter logits; None when not verified


@dataclass
class _Source:
    peft_model: PeftModel
    adapter_name: str
    config: LrsConfig
    base_name: str | None  # base model id or path, for the record
    base_folder: Path | None  # local folder holding the base model's tokenizer files etc.
    adapter_ref: str | None
    restore: Callable[[], None] = lambda: None


# ------------------------------------------------------------------------------------------------ checks


def _local_dir(ref: str | os.PathLike | None) -> Path | None:
    if ref is None:
        return None
    path = Path(ref).expanduser()
    return path.resolve() if path.is_dir() else None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output_folder(out: Path, overwrite: bool, *, base: Path | None = None, adapter: Path | None = None) -> None:
    """Refuse an ``out`` that is non-empty (unless ``overwrite``), a file, or tangled with the inputs."""
    out = out.resolve()
    if (why := unwritable_reason(out, "--out")) is not None:
        raise ExportError(why)
    if base is not None and _inside(out, base):
        raise ExportError(f"--out {out} is inside the base model folder {base}: write the export somewhere else")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file: give a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"--out {out} exists and is not empty: choose a new folder or pass --overwrite")
        for name, folder in (("base model", base), ("adapter", adapter)):
            if folder is not None and _inside(folder, out):
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


def _load_base_config(ref: str) -> PreTrainedConfig:
    try:
        return AutoConfig.from_pretrained(ref)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"cannot read the base model config of {ref}: {first}") from exc


# ----------------------------------------------------------------------------------------------- sources


def _from_path(model: str | os.PathLike, adapter: str | os.PathLike, out: Path, overwrite: bool, dtype: Any) -> _Source:
    base_ref = resolve_model_path(model)
    base_folder = _local_dir(base_ref)
    check_output_folder(out, overwrite, base=base_folder, adapter=_local_dir(adapter))
    config = _checked_adapter(adapter)
    base_config = _load_base_config(base_ref)
    _check_builtin(base_config)
    check_adapter_fits(config, base_config)
    if base_folder is not None:
        check_weight_files(base_folder)
    logger.info("loading %s", base_ref)
    try:
        base = AutoModelForCausalLM.from_pretrained(base_ref, dtype="auto" if dtype is None else dtype)
    except (OSError, ValueError, RuntimeError) as exc:  # the loaders' own errors: one line, naming the model
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"cannot load the base model {os.fspath(model)!r}: {first}") from None
    base.eval()
    with warnings.catch_warnings():
        # the adapter was checked against this base above; PEFT's note that the base's path differs from the
        # adapter's `base_model_name_or_path` (a Hub id vs a local copy of it) only confuses
        warnings.filterwarnings("ignore", message=".*base_model_name_or_path.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        peft_model = PeftModel.from_pretrained(base, os.fspath(adapter))
    return _Source(
        peft_model=peft_model,
        adapter_name="default",
        config=peft_model.peft_config["default"],
        base_name=os.fspath(model),
        base_folder=base_folder or _hub_files(base_ref),
        adapter_ref=os.fspath(adapter),
    )


def _from_model(model: PreTrainedModel, adapter: str | os.PathLike, out: Path, overwrite: bool) -> _Source:
    base_ref = getattr(model.config, "_name_or_path", None) or None
    base_folder = _local_dir(base_ref)
    check_output_folder(out, overwrite, base=base_folder, adapter=_local_dir(adapter))
    config = _checked_adapter(adapter)
    _check_builtin(model.config)
    check_adapter_fits(config, model.config)
    trainable = {name: p.requires_grad for name, p in model.named_parameters()}
    peft_model = PeftModel.from_pretrained(model, os.fspath(adapter))

    def restore() -> None:  # give the caller back the model as it was
        peft_model.unload()
        for name, p in model.named_parameters():
            p.requires_grad_(trainable.get(name, p.requires_grad))

    return _Source(
        peft_model=peft_model,
        adapter_name="default",
        config=peft_model.peft_config["default"],
        base_name=base_ref,
        base_folder=base_folder or _hub_files(base_ref),
        adapter_ref=os.fspath(adapter),
        restore=restore,
    )


def _from_peft_model(model: PeftModel, adapter_name: str | None, out: Path, overwrite: bool) -> _Source:
    name = adapter_name or model.active_adapter
    config = model.peft_config.get(name)
    if not isinstance(config, LrsConfig):
        raise ExportError(
            f"adapter {name!r} of this PeftModel is {type(config).__name__ if config else 'missing'}, not an LRS "
            f"adapter; adapters: {sorted(model.peft_config)}"
        )
    base = model.get_base_model()
    base_ref = getattr(base.config, "_name_or_path", None) or config.base_model_name_or_path
    base_folder = _local_dir(base_ref)
    check_output_folder(out, overwrite, base=base_folder)
    _check_builtin(base.config)
    previous = model.active_adapter
    if name != previous:
        model.set_adapter(name)

    def restore() -> None:
        if name != previous:
            model.set_adapter(previous)

    return _Source(
        peft_model=model,
        adapter_name=name,
        config=config,
        base_name=base_ref,
        base_folder=base_folder or _hub_files(base_ref),
        adapter_ref=None,
        restore=restore,
    )


def _checked_adapter(adapter: str | os.PathLike) -> LrsConfig:
    """The adapter's config; a local folder is checked whole (safetensors too) before any weight is loaded."""
    folder = _local_dir(adapter)
    return check_adapter_folder(folder) if folder is not None else load_lrs_config(adapter)


def _check_builtin(config: PreTrainedConfig) -> None:
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


def _hub_files(ref: str | None) -> Path | None:
    """The base model's small files (tokenizer, templates, licence) from the Hub cache, when ``ref`` is a repo id."""
    if not ref or Path(ref).expanduser().exists():
        return None
    try:
        return Path(snapshot_download(ref, allow_patterns=list(COPIED_FILE_PATTERNS)))
    except Exception as exc:
        logger.warning("cannot fetch the tokenizer files of %s (%s): the export will lack them", ref, exc)
        return None


# ---------------------------------------------------------------------------------------------- writing


def _factors(source: _Source) -> list[float]:
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
    folder: Path, plan: ExportPlan, rope_parameters: RopeSettings, factors: list[float], source: _Source
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


def _sidecar(source: _Source, plan: ExportPlan, rope_parameters: RopeSettings, factors: list[float]) -> ExportSidecar:
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
        source = _from_peft_model(model_or_path, None if adapter is None else str(adapter), out, overwrite)
    elif adapter is None:
        raise ExportError("give the LRS adapter to export (folder or Hub repo id)")
    elif isinstance(model_or_path, PreTrainedModel):
        source = _from_model(model_or_path, adapter, out, overwrite)
    else:
        source = _from_path(model_or_path, adapter, out, overwrite, dtype)
    try:
        with sigterm_as_interrupt():
            return _export(source, out, overwrite, verify, tokenizer, max_shard_size, atol, probe_length)
    finally:
        source.restore()


def _export(
    source: _Source,
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
