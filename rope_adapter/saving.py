"""An LRS adapter folder written so that a failed save leaves the previous one intact, byte for byte.

``PeftModel.save_pretrained`` writes ``adapter_model.safetensors`` in place, then ``adapter_config.json``. For LRS
adapters only (a state dict holding nothing but ``*.lrs_factors``), PEFT's ``safe_save_file`` is wrapped
(:func:`install`): the weights go to a temporary file in the same folder and wait there; ``LrsConfig.save_pretrained``
stages ``adapter_config.json`` the same way and only then renames both over the old files
(:func:`commit_staged_weights`), so a failure in either write (a full disk, say) changes nothing and leaves no
temporary file behind (:func:`discard_staged_weights`). PEFT's model card (``README.md``, written first) is
written for LRS models into a temporary folder and renamed over the old one (:func:`atomic_model_card`), so it is
never left half-written. Other adapter types are saved by PEFT as before.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import peft.peft_model as peft_model

from .peft_type import LRS_PEFT_TYPE

FACTORS_KEY_SUFFIX = "lrs_factors"
"""The last part of the name of an LRS adapter's one tensor in ``adapter_model.safetensors``."""

_STAGED: dict[Path, tuple[Path, Path]] = {}  # folder -> (temporary weights file, the file it will replace)


def is_lrs_state_dict(tensors: Mapping[str, Any]) -> bool:
    """True for the state dict of an LRS adapter: only ``*.lrs_factors`` tensors."""
    return bool(tensors) and all(str(k).split(".")[-1] == FACTORS_KEY_SUFFIX for k in tensors)


def discard_staged_weights(folder: str | os.PathLike[str]) -> None:
    """Remove the weights staged for ``folder`` by a save that did not get to its config (nothing when none)."""
    staged = _STAGED.pop(Path(folder).resolve(), None)
    if staged is not None:
        staged[0].unlink(missing_ok=True)


def commit_staged_weights(folder: str | os.PathLike[str]) -> None:
    """Rename the weights staged for ``folder`` over its ``adapter_model.safetensors`` (nothing when none)."""
    staged = _STAGED.pop(Path(folder).resolve(), None)
    if staged is not None:
        os.replace(staged[0], staged[1])


def atomic_save_file(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (safetensors' ``save_file``), writing an LRS state dict to a staged temporary file instead."""

    def save_file(tensors: dict[str, Any], filename: str, metadata: dict[str, str] | None = None) -> None:
        if not is_lrs_state_dict(tensors):
            original(tensors, filename, metadata=metadata)
            return
        target = Path(filename)
        folder = target.parent.resolve()
        discard_staged_weights(folder)  # left by an earlier save that failed between the two writes
        handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
        os.close(handle)
        staged = Path(name)
        try:
            original(tensors, str(staged), metadata=metadata)
            with open(staged, "rb") as written:
                os.fsync(written.fileno())
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        _STAGED[folder] = (staged, target)

    save_file._lrs_atomic = True  # type: ignore[attr-defined]
    return save_file


def _is_lrs_model(model: Any) -> bool:
    configs = getattr(model, "peft_config", None) or {}
    return bool(configs) and all(getattr(c, "peft_type", None) == LRS_PEFT_TYPE for c in configs.values())


def _card_base_model(card: Path, recorded: str | None) -> None:
    """PEFT's card names the base model by the loaded model's ``_name_or_path`` (a local cache folder for the embedded
    models); the Hub's model tree reads that field. Write the adapter config's ``base_model_name_or_path`` there
    instead (the Hub id a search records), or drop the line when that too is a local path."""
    text = card.read_text(encoding="utf-8")
    if not text.startswith("---\n") or "\n---" not in text[4:]:
        return
    end = text.index("\n---", 4)
    head, rest = text[4:end], text[end:]
    local = recorded is None or recorded.startswith(("/", "~", ".")) or Path(recorded).expanduser().exists()
    line = None if local else f"base_model: {recorded}"
    tag = None if local else f"- base_model:adapter:{recorded}"
    lines = [
        line if entry.startswith("base_model:") else tag if "base_model:adapter:" in entry else entry
        for entry in head.split("\n")
    ]
    card.write_text("---\n" + "\n".join(x for x in lines if x is not None) + rest, encoding="utf-8")


def atomic_model_card(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (``PeftModel.create_or_update_model_card``), for LRS models updating ``README.md`` in a
    temporary folder beside it and renaming the result over it: a failure leaves the old card as it was."""

    def create_or_update_model_card(self: Any, output_dir: str) -> None:
        if not _is_lrs_model(self):
            original(self, output_dir)
            return
        folder = Path(output_dir)
        work = Path(tempfile.mkdtemp(prefix=".README.", suffix=".tmp", dir=folder))
        try:
            if (folder / "README.md").is_file():
                shutil.copy2(folder / "README.md", work / "README.md")
            original(self, str(work))
            _card_base_model(work / "README.md", self.peft_config[self.active_adapter].base_model_name_or_path)
            os.replace(work / "README.md", folder / "README.md")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    create_or_update_model_card._lrs_atomic = True  # type: ignore[attr-defined]
    return create_or_update_model_card


def install() -> None:
    """Wrap PEFT's ``safe_save_file`` with :func:`atomic_save_file` and ``PeftModel.create_or_update_model_card``
    with :func:`atomic_model_card` (idempotent)."""
    if not getattr(peft_model.safe_save_file, "_lrs_atomic", False):
        peft_model.safe_save_file = atomic_save_file(peft_model.safe_save_file)
    card = peft_model.PeftModel.create_or_update_model_card
    if not getattr(card, "_lrs_atomic", False):
        peft_model.PeftModel.create_or_update_model_card = atomic_model_card(card)
