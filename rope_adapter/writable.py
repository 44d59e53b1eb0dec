"""One check, before any work, that a folder can be written: shared by search, eval and export."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path


def unwritable_reason(folder: str | os.PathLike[str], what: str) -> str | None:
    """Why nothing can be written under ``folder`` (made if missing), or None.

    The nearest existing ancestor must be a folder where a small file can be written and flushed: this catches a
    file in the way, read-only and full file systems. Nothing is created; the probe file is gone afterwards.
    """
    folder = Path(folder)
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{what} {folder} cannot be made: {ancestor} is a file"
    try:
        with tempfile.TemporaryFile(dir=ancestor) as probe:
            probe.write(b"\0" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return f"{what} {folder} is not writable ({exc.strerror or exc}): free some space or choose another folder"
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


def write_text_atomic(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename: readers see the old
    file or the new one, never a part; a failed write (a full disk) leaves the old file as it was."""
    write_bytes_atomic(path, text.encode(encoding))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """:func:`write_text_atomic` for bytes."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def savefig_atomic(fig: object, path: str | os.PathLike[str], **kwargs: object) -> None:
    """``fig.savefig`` through a temporary file and a rename (the format from ``path``'s suffix)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **kwargs)  # type: ignore[attr-defined]
    write_bytes_atomic(path, buffer.getvalue())
