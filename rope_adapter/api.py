"""Small public helpers around the tuner: read an adapter without a model, swap factors in place."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from .config import LrsConfig, check_resolved
from .errors import AdapterFileError
from .factors import check_factors_tensor
from .registration import LRS_PEFT_TYPE

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"


def _adapter_file(path_or_repo: str | os.PathLike, filename: str, **hub_kwargs: Any) -> Path:
    path = Path(path_or_repo)
    if path.is_dir():
        file = path / filename
        if not file.is_file():
            raise AdapterFileError(f"{path} has no {filename}: is it an LRS adapter folder (save_pretrained output)?")
        return file
    if path.exists():
        raise AdapterFileError(f"{path} is a file; give the adapter folder that holds {filename}")
    text = str(path_or_repo)
    if path.is_absolute() or text.startswith(".") or text.count("/") > 1 or "\\" in text:
        raise AdapterFileError(f"{text}: no such adapter folder (and not a Hub repo id of the form org/name)")
    from transformers.utils import cached_file  # a repo id, resolved like transformers and PEFT do

    try:
        return Path(cached_file(text, filename, **hub_kwargs))
    except Exception as exc:  # noqa: BLE001 - one clear line for any download failure
        raise AdapterFileError(
            f"cannot read {filename} of {text}: not a local folder, and fetching it failed: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc


def load_lrs_config(path_or_repo: str | os.PathLike, **hub_kwargs: Any) -> LrsConfig:
    """Read and validate an LRS adapter's ``adapter_config.json`` (local folder or Hub repo id)."""
    file = _adapter_file(path_or_repo, CONFIG_NAME, **hub_kwargs)
    try:
        raw = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise AdapterFileError(f"{file} is not valid JSON ({exc}); re-save the adapter with save_pretrained()") from exc
    if not isinstance(raw, dict):
        raise AdapterFileError(
            f"{file} must hold a JSON object, found {type(raw).__name__}; re-save the adapter with save_pretrained()"
        )
    peft_type = raw.get("peft_type")
    if peft_type is None:
        raise AdapterFileError(
            f'{file} has no peft_type: an LRS adapter\'s config says "peft_type": "LRS"; re-save the adapter '
            f"with save_pretrained()"
        )
    if isinstance(peft_type, str) and peft_type != LRS_PEFT_TYPE.value and peft_type.upper() == LRS_PEFT_TYPE.value:
        raise AdapterFileError(f'{file}: peft_type is {peft_type!r}; PEFT needs it upper-case: "peft_type": "LRS"')
    if peft_type != LRS_PEFT_TYPE.value:
        raise AdapterFileError(f"{file}: peft_type is {peft_type!r}, not 'LRS': this is not an LRS adapter")
    known = set(LrsConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise AdapterFileError(f"{file}: unknown keys {unknown}; was it edited by hand or made by a newer version?")
    try:
        config = LrsConfig(**raw)
    except (TypeError, ValueError) as exc:
        raise AdapterFileError(f"{file}: {exc}") from exc
    check_resolved(config, str(file))
    return config


def read_adapter_factors(path_or_repo: str | os.PathLike, **hub_kwargs: Any) -> tuple[LrsConfig, torch.Tensor]:
    """The validated config and factor tensor of an adapter, checked against each other, without a model."""
    config = load_lrs_config(path_or_repo, **hub_kwargs)
    file = _adapter_file(path_or_repo, WEIGHTS_NAME, **hub_kwargs)
    return config, _checked_tensor(config, file)


def check_adapter_folder(folder: str | os.PathLike) -> LrsConfig:
    """Check a local adapter folder completely before anything loads it: adapter_config.json and
    adapter_model.safetensors (or a PEFT ``adapter_model.bin``), and that they agree. Raises AdapterFileError."""
    folder = Path(folder)
    config = load_lrs_config(folder)
    file = folder / WEIGHTS_NAME
    if file.is_file():
        _checked_tensor(config, file)
    elif not (folder / "adapter_model.bin").is_file():
        raise AdapterFileError(
            f"{folder} has {CONFIG_NAME} but no {WEIGHTS_NAME}: the adapter folder is incomplete; copy the whole "
            f"folder written by save_pretrained()"
        )
    return config


def _checked_tensor(config: LrsConfig, file: Path) -> torch.Tensor:
    if file.stat().st_size == 0:
        raise AdapterFileError(f"{file} is empty (0 bytes): re-save the adapter with save_pretrained()")
    try:
        tensors = load_file(str(file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise AdapterFileError(
            f"{file} is not a readable safetensors file ({exc}); it is truncated or damaged: re-save or re-download "
            f"the adapter"
        ) from exc
    keys = [k for k in tensors if k.endswith(".lrs_factors")]
    if len(keys) != 1 or len(tensors) != 1:
        raise AdapterFileError(f"{file} must hold exactly one '*.lrs_factors' tensor, found {sorted(tensors)}")
    tensor = tensors[keys[0]]
    check_factors_tensor(tensor, config.num_layers, str(file))  # type: ignore[arg-type]
    if not torch.equal(tensor, torch.tensor(config.factors, dtype=torch.float32)):
        raise AdapterFileError(
            f"{file} and {CONFIG_NAME} disagree on the factors ({tensor.tolist()} vs {config.factors}): the folder "
            f"was edited by hand; re-save it with save_pretrained()"
        )
    return tensor


def _tuner(model: Any):
    from .model import LrsModel

    tuner = getattr(model, "base_model", model)
    if not isinstance(tuner, LrsModel):
        raise TypeError(f"expected a PeftModel with an LRS adapter, got {type(model).__name__}")
    return tuner


def set_factors(model: Any, factors: float | list[float], adapter_name: str | None = None) -> None:
    """Swap an LRS adapter's factors in place on a ``PeftModel`` (no re-injection; used by every search trial)."""
    _tuner(model).set_factors(factors, adapter_name)


def get_factors(model: Any, adapter_name: str | None = None) -> list[float]:
    """The active (or named) LRS adapter's factors as floats."""
    return _tuner(model).get_factors(adapter_name)
