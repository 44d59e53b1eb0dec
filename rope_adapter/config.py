"""LrsConfig: the adapter's contract, everything needed to rebuild it (the numbers also live in safetensors), and
the readers that check an adapter folder's two files against it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft.config import PeftConfig
from safetensors import SafetensorError
from safetensors.torch import load_file
from transformers.utils import cached_file

from . import files
from .errors import AdapterFileError, InvalidFactorsError, RecordFileError
from .factors import check_factors_tensor, validate_factors
from .files import dumps_json
from .json_types import JsonObject
from .numbers import as_int, is_scalar
from .peft_type import LRS_PEFT_TYPE
from .records import read_json
from .rope_settings import RopeSettings
from .saving import commit_staged_weights, discard_staged_weights


@dataclass
class LrsConfig(PeftConfig):
    """Configuration of a Layer-specific RoPE Scaling (LRS) adapter (arXiv 2503.04355).

    Layer ``l`` rotates queries and keys with ``inv_freq / factors[l]``. The adapter holds no trainable
    parameter; its factors are stored as a float32 tensor in ``adapter_model.safetensors`` and, for reading
    without torch, in ``adapter_config.json``.
    """

    factors: list[float] | float | None = field(
        default=None,
        metadata={
            "help": "One RoPE scaling factor per decoder layer (> 0; 1.0 leaves a layer unchanged). A single number "
            "applies to every layer; None means all ones (the base model), e.g. as a start for a search."
        },
    )
    num_layers: int | None = field(
        default=None,
        metadata={"help": "Decoder layer count of the base model; filled in when the adapter is made."},
    )
    head_dim: int | None = field(
        default=None,
        metadata={"help": "Attention head size of the base model; filled in when the adapter is made."},
    )
    rotary_dim: int | None = field(
        default=None,
        metadata={"help": "Rotated channels per head (< head_dim for partial rotary); filled in."},
    )
    base_model_type: str | None = field(
        default=None, metadata={"help": "model_type of the base model (e.g. 'llama'); filled in."}
    )
    base_rope_parameters: RopeSettings | None = field(
        default=None,
        metadata={"help": "The base model's rope_parameters the factors were made for; filled in."},
    )
    provenance: JsonObject | None = field(  # a search writes rope_adapter.provenance.Provenance
        default=None,
        metadata={"help": "How the factors were found: curve, control points, search study, task, scores."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.peft_type = LRS_PEFT_TYPE
        for name in ("num_layers", "head_dim", "rotary_dim"):  # any integer type (numpy's too), as a Python int
            value = getattr(self, name)
            try:
                setattr(self, name, as_int(value, name, error=AdapterFileError, low=1, optional=True))
            except AdapterFileError:
                raise AdapterFileError(
                    f"adapter_config.json: {name} must be a positive integer, found {value!r}"
                ) from None
        if self.base_model_type is not None and not isinstance(self.base_model_type, str):
            raise AdapterFileError(
                f"adapter_config.json: base_model_type must be a string, found {self.base_model_type!r}"
            )
        if self.base_rope_parameters is not None and not isinstance(self.base_rope_parameters, dict):
            raise AdapterFileError(
                f"adapter_config.json: base_rope_parameters must be an object (the base model's rope_parameters) or "
                f"null, found {type(self.base_rope_parameters).__name__} {self.base_rope_parameters!r}"
            )
        if self.factors is not None:
            if self.num_layers is None and is_scalar(self.factors):
                self.factors = validate_factors(self.factors, 1)[0]
            elif self.num_layers is None:
                self.factors = validate_factors(self.factors, _count(self.factors))
            else:
                try:
                    self.factors = validate_factors(self.factors, self.num_layers)
                except InvalidFactorsError as exc:
                    if _count(self.factors) in (None, self.num_layers):
                        raise
                    raise AdapterFileError(
                        f"adapter_config.json: num_layers is {self.num_layers} but it lists {_count(self.factors)} "
                        f"factors: the file was edited by hand; re-save the adapter with save_pretrained()"
                    ) from exc
        check_provenance(self.provenance)

    def save_pretrained(self, save_directory: str, **kwargs: Any) -> None:
        """Write adapter_config.json atomically: PEFT's content, as strict JSON (a NaN or a value JSON cannot hold
        is refused, naming the field, before any write), staged in a temporary file and renamed over the old one
        together with the weights ``PeftModel.save_pretrained`` staged just before (:mod:`rope_adapter.saving`);
        a failure leaves the previous files intact and no temporary file."""
        folder = Path(save_directory)
        try:
            check_provenance(self.provenance)
            if folder.is_file():
                raise AdapterFileError(f"{folder} is a file: save_pretrained needs a folder")
            output = self.to_dict()
            for key, value in output.items():  # as PEFT's PeftConfigMixin.save_pretrained
                if isinstance(value, set):
                    output[key] = list(value)
            auto_mapping = kwargs.pop("auto_mapping_dict", None)
            if auto_mapping is not None:
                output["auto_mapping"] = auto_mapping
            text = dumps_json(output, where=folder / CONFIG_NAME, indent=2, sort_keys=True)
            folder.mkdir(parents=True, exist_ok=True)
            staged = files.stage(folder / CONFIG_NAME, text.encode("utf-8"))
            try:
                commit_staged_weights(folder)
                staged.commit()
            finally:
                staged.discard()  # nothing when it was committed
        finally:
            discard_staged_weights(folder)  # nothing left when they were committed

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str, subfolder: str | None = None, **kwargs: Any
    ) -> LrsConfig:
        """PEFT's loader, after checking a local adapter folder completely (config, safetensors, and that they
        agree), so that ``PeftModel.from_pretrained`` and ``load_adapter`` refuse a bad folder before they change
        the model."""
        folder = Path(pretrained_model_name_or_path, subfolder) if subfolder else Path(pretrained_model_name_or_path)
        if folder.is_dir():
            check_adapter_folder(folder)
        config = super().from_pretrained(pretrained_model_name_or_path, subfolder=subfolder, **kwargs)
        if folder.is_dir():  # not a dataclass field: never saved; read back only if the weights disagree
            object.__setattr__(config, "_lrs_source", (folder, _listed_factors(folder)))
        return config

    def changed_on_disk(self) -> bool:
        """True when this config was read from a folder whose ``adapter_config.json`` now lists other factors (the
        folder was saved again while the adapter was being loaded)."""
        source = getattr(self, "_lrs_source", None)
        return source is not None and _listed_factors(source[0]) != source[1]

    @property
    def resolved(self) -> bool:
        """True once the config has been bound to a model (layer count and factors list known)."""
        return self.num_layers is not None and isinstance(self.factors, list)


def check_resolved(config: LrsConfig, where: str) -> list[float]:
    """Factors of a config read from disk, which must be complete."""
    if not config.resolved:
        raise AdapterFileError(f"{where}: adapter_config.json lacks 'factors' or 'num_layers'")
    try:
        return validate_factors(config.factors, config.num_layers)
    except InvalidFactorsError as exc:
        raise AdapterFileError(f"{where}: {exc}") from exc


def _listed_factors(folder: Path) -> Any:
    """The ``factors`` entry of ``folder/adapter_config.json`` as written (None when unreadable)."""
    try:
        return read_json(folder / "adapter_config.json").get("factors")
    except (OSError, ValueError, AttributeError):
        return None


def _count(factors: Any) -> int | None:
    try:
        return len(factors)
    except TypeError:
        return None


def check_provenance(provenance: Any) -> None:
    """Provenance must be a JSON object (or None) of strict JSON values, finite numbers only: it is written into
    adapter_config.json. Refused with :class:`~rope_adapter.errors.NotJsonError` naming the field."""
    if provenance is None:
        return
    if not isinstance(provenance, dict):
        raise AdapterFileError(f"provenance must be a JSON object or None, found {type(provenance).__name__}")
    dumps_json(provenance, where="LrsConfig", field="provenance")


# ---------------------------------------------------------------------------------- reading adapter folders

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
    try:  # a repo id, resolved like transformers and PEFT do
        return Path(cached_file(text, filename, **hub_kwargs))
    except Exception as exc:
        raise AdapterFileError(
            f"cannot read {filename} of {text}: not a local folder, and fetching it failed: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc


def load_lrs_config(path_or_repo: str | os.PathLike, **hub_kwargs: Any) -> LrsConfig:
    """Read and validate an LRS adapter's ``adapter_config.json`` (local folder or Hub repo id)."""
    file = _adapter_file(path_or_repo, CONFIG_NAME, **hub_kwargs)
    try:
        raw = read_json(file)
    except RecordFileError as exc:
        raise AdapterFileError(f"{exc}; re-save the adapter with save_pretrained()") from exc
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
    check_factors_tensor(tensor, config.num_layers, str(file))
    if not torch.equal(tensor, torch.tensor(config.factors, dtype=torch.float32)):
        raise AdapterFileError(
            f"{file} and {CONFIG_NAME} disagree on the factors ({tensor.tolist()} vs {config.factors}): the folder "
            f"was edited by hand; re-save it with save_pretrained()"
        )
    return tensor
