"""What a model or a data file holds, named without its local path: a study's fingerprint and an interrupted
``eval`` run recognise the same model on any machine, and another model under the same path as another; a Hub
model by the commit its name points to, so that a repository updated between two runs is another model.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TypedDict

from .embedded.registry import find_embedded

WEIGHT_SAMPLES = 64
"""Chunks read from each weights file for :func:`weights_fingerprint` (64 KiB each, evenly spaced)."""


class FileIdentity(TypedDict):
    """A file as a fingerprint names it."""

    name: str  # the file's name, its folder left out
    sha256: str


class FolderIdentity(TypedDict):
    """A local model folder as a fingerprint names it (see :func:`model_identity`)."""

    folder: str  # the folder's name
    config: str | None  # sha256 of its config.json
    weights: str | None  # weights_fingerprint


class HubIdentity(TypedDict):
    """A Hub model as a fingerprint names it (see :func:`model_identity`)."""

    hub: str  # the repository id
    revision: str  # the commit its default branch pointed to


def file_identity(path: str | os.PathLike[str]) -> FileIdentity:
    """A file as its name and sha256 (its folder left out)."""
    p = Path(path)
    digest = hashlib.sha256()
    with open(p, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {"name": p.name, "sha256": digest.hexdigest()}


def model_identity(name: str) -> FolderIdentity | HubIdentity | str:
    """How the model is named in a study's settings: local folders by folder name + config.json hash + weights
    fingerprint (so that machines with other paths to the same model can share a study), an embedded model by its
    name, a Hub id by the commit it resolves to (:func:`hub_commit`), anything else (a Hub id that cannot be resolved:
    no network and no cached copy) by its name."""
    path = Path(name).expanduser()
    embedded = find_embedded(name)
    if embedded is not None and not path.exists() and name.casefold() == embedded.name.casefold():
        return embedded.name
    if path.is_dir():
        config = path / "config.json"
        return {
            "folder": path.name,
            "config": file_identity(config)["sha256"] if config.is_file() else None,
            "weights": weights_fingerprint(path),
        }
    commit = hub_commit(name)
    return name if commit is None else {"hub": name, "revision": commit}


def hub_commit(name: str) -> str | None:
    """The commit that Hub id ``name``'s default branch points to, as transformers resolves it before it loads the
    model (from the local cache when offline); None when it cannot be resolved (no such repository, no network and
    no cached copy), in which case loading reports the problem."""
    if Path(name).expanduser().exists():
        return None
    try:
        from transformers.utils.hub import resolve_revision
    except ImportError:  # a transformers without it: the name alone, as before
        return None
    resolved = getattr(resolve_revision(name), "resolved", None)
    return resolved if isinstance(resolved, str) else None


def weights_fingerprint(folder: Path) -> str | None:
    """A cheap fingerprint of a model folder's weights: sha256 over each ``*.safetensors`` / ``*.bin`` file's name,
    size, header and :data:`WEIGHT_SAMPLES` evenly spaced 64 KiB chunks (other weights of the same architecture
    differ there; reading a few MB instead of gigabytes). None when the folder has no weights file."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}".encode())
        with open(file, "rb") as handle:
            for i in range(WEIGHT_SAMPLES + 1):
                handle.seek(min(size, (size * i) // (WEIGHT_SAMPLES + 1)))
                digest.update(handle.read(1 << 16))
    return digest.hexdigest()
