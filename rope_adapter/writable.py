"""One check, before any work, that a folder can be written: shared by search, eval and export."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def unwritable_reason(folder: str | os.PathLike[str], what: str) -> str | None:
    """Why nothing can be written under ``folder`` (made if missing), or None.

    The nearest existing ancestor must be a folder where a small file can be written and flushed: this catches a
    file in the way, read-only and full file systems. Nothing is created; the probe file is gone afterwards.
    """
    if (why := folder_path_reason(folder, what)) is not None:
        return why
    folder = Path(folder)
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    try:
        with tempfile.TemporaryFile(dir=ancestor) as probe:
            probe.write(b"\0" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return f"{what} {folder} is not writable ({exc.strerror or exc}): free some space or choose another folder"
    return None


def folder_path_reason(folder: str | os.PathLike[str], what: str) -> str | None:
    """Why ``folder`` cannot be an output folder, looking only at the path (nothing is written), or None: a blank
    path, a file (or a symlink to one), a symlink to nothing (``mkdir`` would fail on it), or a file or a symlink to
    nothing where one of its parent folders should be."""
    if (why := blank_path_reason(folder, what)) is not None:
        return why
    folder = Path(folder)
    for path in (folder, *folder.parents):
        if path.is_symlink() and not path.exists():
            where = "" if path == folder else f" (in the way of {folder})"
            return (
                f"{what} {path} is a symlink to {os.readlink(path)}, which does not exist{where}: remove it or "
                "choose another folder"
            )
        if path.exists():
            if path.is_dir():
                return None
            if path == folder:
                return f"{what} {folder} is a file: give a folder"
            return f"{what} {folder} cannot be made: {path} is a file"
    return None


def blank_path_reason(path: str | os.PathLike[str] | None, what: str) -> str | None:
    """Why ``path`` cannot name an output (empty or only whitespace: read as the current folder by ``Path``), or
    None. Checked on the text, before ``Path("")`` turns it into ``"."``."""
    if path is None:
        return None
    text = os.fspath(path)
    if not text.strip():
        return (
            f"{what} is empty: give the name of a folder or file to write (an empty path is never the current folder)"
        )
    return None
