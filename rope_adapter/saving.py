"""An LRS adapter folder written so that a failed save leaves the previous one intact, byte for byte.

``PeftModel.save_pretrained`` writes ``adapter_model.safetensors`` in place, then ``adapter_config.json``. For LRS
adapters only (a state dict holding nothing but ``*.lrs_factors``), PEFT's ``safe_save_file`` is wrapped
(:func:`install`): the weights go to a temporary file in the same folder (:func:`rope_adapter.files.stage`) and wait
there; ``LrsConfig.save_pretrained`` stages ``adapter_config.json`` the same way and only then renames both over
the old files (:func:`commit_staged_weights`), so a failure in either write (a full disk, say) changes nothing and
leaves no temporary file behind (:func:`discard_staged_weights`). PEFT's model card (``README.md``, written first)
is written for LRS models into a temporary folder and its text written over the old card atomically
(:func:`atomic_model_card`), so it is never left half-written. Other adapter types are saved by PEFT as before.

``PeftModel.save_pretrained`` itself is wrapped for LRS models (:func:`checked_save_pretrained`): an LRS adapter is
always written as ``adapter_model.safetensors`` (``safe_serialization=False`` gets a warning: the pickle format
holds the same one tensor, and PEFT and every rope-adapter reader load safetensors first), and an
``adapter_model.bin`` an earlier save of an LRS adapter left in the folder is removed once the new files are in
place, so that the folder holds one set of weights. An ``adapter_model.bin`` that is not an LRS adapter's is refused
before anything is written.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import peft.peft_model as peft_model
import torch

from . import files
from .errors import AdapterFileError
from .peft_type import LRS_PEFT_TYPE
from .writable import folder_path_reason

FACTORS_KEY_SUFFIX = "lrs_factors"
"""The last part of the name of an LRS adapter's one tensor in ``adapter_model.safetensors``."""

WEIGHTS_NAME = "adapter_model.safetensors"

_STAGED: dict[Path, files.Staged] = {}  # folder -> the weights staged for it


def is_lrs_state_dict(tensors: Mapping[str, Any]) -> bool:
    """True for the state dict of an LRS adapter: only ``*.lrs_factors`` tensors."""
    return bool(tensors) and all(str(k).split(".")[-1] == FACTORS_KEY_SUFFIX for k in tensors)


def discard_staged_weights(folder: str | os.PathLike[str]) -> None:
    """Remove the weights staged for ``folder`` by a save that did not get to its config (nothing when none)."""
    staged = _STAGED.pop(Path(folder).resolve(), None)
    if staged is not None:
        staged.discard()


def commit_staged_weights(folder: str | os.PathLike[str]) -> None:
    """Rename the weights staged for ``folder`` over its ``adapter_model.safetensors``, then remove the
    ``adapter_model.bin`` an earlier save of an LRS adapter left there (nothing when no weights were staged)."""
    staged = _STAGED.pop(Path(folder).resolve(), None)
    if staged is not None:
        staged.commit()
        files.clear_other_formats(folder, "adapter", {WEIGHTS_NAME}, is_lrs_weights_file)


def is_lrs_weights_file(path: Path) -> bool:
    """True for an adapter weights file (safetensors or PEFT's pickle) that holds an LRS adapter's factors only:
    what a save of an LRS adapter writes. The pickle is read with ``weights_only=True`` (no code runs)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                return is_lrs_state_dict(dict.fromkeys(handle.keys()))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # unreadable: not a file we can call ours
        return False
    return isinstance(state, Mapping) and is_lrs_state_dict(state)


def atomic_save_file(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (safetensors' ``save_file``), writing an LRS state dict to a staged temporary file instead."""

    def save_file(tensors: dict[str, torch.Tensor], filename: str, metadata: dict[str, str] | None = None) -> None:
        if not is_lrs_state_dict(tensors):
            original(tensors, filename, metadata=metadata)
            return
        target = Path(filename)
        folder = target.parent.resolve()
        discard_staged_weights(folder)  # left by an earlier save that failed between the two writes
        staged = files.stage(target)
        try:
            original(tensors, str(staged.temp), metadata=metadata)
        except BaseException:
            staged.discard()
            raise
        _STAGED[folder] = staged

    save_file._lrs_atomic = True
    return save_file


def _is_lrs_model(model: Any) -> bool:
    configs = getattr(model, "peft_config", None) or {}
    return bool(configs) and all(getattr(c, "peft_type", None) == LRS_PEFT_TYPE for c in configs.values())


def _card_base_model(card: Path, recorded: str | None) -> str:
    """PEFT's card names the base model by the loaded model's ``_name_or_path`` (a local cache folder for the embedded
    models); the Hub's model tree reads that field. Write the adapter config's ``base_model_name_or_path`` there
    instead (the Hub id a search records), or drop the line when that too is a local path."""
    text = card.read_text(encoding="utf-8")
    if not text.startswith("---\n") or "\n---" not in text[4:]:
        return text
    end = text.index("\n---", 4)
    head, rest = text[4:end], text[end:]
    local = recorded is None or recorded.startswith(("/", "~", ".")) or Path(recorded).expanduser().exists()
    line = None if local else f"base_model: {recorded}"
    tag = None if local else f"- base_model:adapter:{recorded}"
    lines = [
        line if entry.startswith("base_model:") else tag if "base_model:adapter:" in entry else entry
        for entry in head.split("\n")
    ]
    return "---\n" + "\n".join(x for x in lines if x is not None) + rest


def atomic_model_card(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (``PeftModel.create_or_update_model_card``), for LRS models updating a copy of ``README.md``
    in a temporary folder beside it and writing the result over it atomically: a failure leaves the old card as it
    was."""

    def create_or_update_model_card(self: Any, output_dir: str) -> None:
        if not _is_lrs_model(self):
            original(self, output_dir)
            return
        folder = Path(output_dir)
        work = Path(tempfile.mkdtemp(prefix=".README.", suffix=".tmp", dir=folder))
        try:
            if (folder / "README.md").is_file():  # PEFT updates the card it finds
                files.write_bytes(work / "README.md", (folder / "README.md").read_bytes())
            original(self, str(work))
            text = _card_base_model(work / "README.md", self.peft_config[self.active_adapter].base_model_name_or_path)
            files.write_text(folder / "README.md", text)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    create_or_update_model_card._lrs_atomic = True
    return create_or_update_model_card


def checked_save_pretrained(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (``PeftModel.save_pretrained``), for LRS models always in safetensors and refusing, before any
    write, a folder whose ``adapter_model.bin`` is not an LRS adapter's (see the module's notes)."""

    @functools.wraps(original)
    def save_pretrained(self: Any, save_directory: str, *args: Any, **kwargs: Any) -> None:
        if not _is_lrs_model(self):
            return original(self, save_directory, *args, **kwargs)
        if (why := folder_path_reason(save_directory, "save_pretrained: save_directory")) is not None:
            raise AdapterFileError(why)  # before PEFT makes the folder or writes the card
        if args:  # PEFT's signature: save_directory, safe_serialization, selected_adapters, ...
            kwargs["safe_serialization"], args = args[0], args[1:]
        if kwargs.get("safe_serialization", True) is False:
            warnings.warn(
                f"an LRS adapter is always saved as {WEIGHTS_NAME} (safe_serialization=False is ignored): the pickle "
                f"format would hold the same one tensor, and a folder with both files would load the older one",
                UserWarning,
                stacklevel=2,
            )
        kwargs["safe_serialization"] = True
        selected = kwargs.get("selected_adapters") or (args[0] if args else None) or list(self.peft_config)
        for name in selected:
            if name in self.peft_config:
                folder = Path(save_directory) if name == "default" else Path(save_directory, name)
                files.clear_other_formats(folder, "adapter", {WEIGHTS_NAME}, is_lrs_weights_file, dry_run=True)
        return original(self, save_directory, *args, **kwargs)

    save_pretrained._lrs_atomic = True
    return save_pretrained


def install() -> None:
    """Wrap PEFT's ``safe_save_file`` with :func:`atomic_save_file`, ``PeftModel.create_or_update_model_card``
    with :func:`atomic_model_card` and ``PeftModel.save_pretrained`` with :func:`checked_save_pretrained`
    (idempotent)."""
    if not getattr(peft_model.safe_save_file, "_lrs_atomic", False):
        peft_model.safe_save_file = atomic_save_file(peft_model.safe_save_file)
    card = peft_model.PeftModel.create_or_update_model_card
    if not getattr(card, "_lrs_atomic", False):
        peft_model.PeftModel.create_or_update_model_card = atomic_model_card(card)
    save = peft_model.PeftModel.save_pretrained
    if not getattr(save, "_lrs_atomic", False):
        peft_model.PeftModel.save_pretrained = checked_save_pretrained(save)
