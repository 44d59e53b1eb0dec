"""The one way rope-adapter writes a file.

Every file the project writes (adapters, configs, cards, reports, JSON, figures, study outputs, exported folders)
goes through this module, and ``tests/test_layout.py`` fails on a write anywhere else:

- :func:`write_bytes`, :func:`write_text`, :func:`write_json`, :func:`append_text`, :func:`save_figure`: the data
  goes to a temporary file in the same folder (``.NAME.XXXXXXXX.tmp``), is flushed and fsynced, and the temporary
  file is renamed over ``path``. Readers see the old file or the new one, never a part; a failure (a full disk, an
  error in the writer, Ctrl-C) leaves the old file byte for byte and no temporary file.
- :func:`writing`: the same for writers that need a path (safetensors' ``save_file``, ``torch.save``, PIL).
- :func:`stage`: a temporary file that is renamed later (:meth:`Staged.commit`), for saves of several files that
  must land together.
- The mode of a new file is the one ``open(path, "w")`` would give: the temporary file is created by the kernel with
  ``0o666`` and the process's umask (and the folder's default ACL, if any); nothing reads or changes the umask. A
  file that replaces another keeps the old file's permission bits, as ``open(path, "w")`` would.
- :func:`dumps_json`: the one JSON encoder for what we write (``allow_nan=False``); a NaN, an infinity or a value
  JSON cannot hold raises :class:`~rope_adapter.errors.NotJsonError` naming the file and the field.
- :func:`clear_other_formats`: a folder-level save removes the weights a previous save of another format left
  (``adapter_model.bin`` beside ``adapter_model.safetensors``, ``pytorch_model-*.bin`` shards beside
  ``model.safetensors``), but only files the caller recognises as its own; any other such file is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import FolderFormatError, NotJsonError

__all__ = [
    "Staged",
    "append_text",
    "clear_other_formats",
    "copy_file",
    "dumps_json",
    "first_non_json",
    "save_figure",
    "set_default_modes",
    "stage",
    "write_bytes",
    "write_json",
    "write_text",
    "writing",
]

TEMP_SUFFIX = ".tmp"
"""Every temporary file this module makes is ``.<target name>.<8 hex digits>.tmp`` in the target's folder."""


# ------------------------------------------------------------------------------------------------ staging


@dataclass
class Staged:
    """A temporary file written beside ``target``; :meth:`commit` renames it over ``target``, :meth:`discard`
    removes it. Both are safe to call more than once."""

    temp: Path
    target: Path
    mode: int
    done: bool = False

    def commit(self) -> None:
        """Flush the temporary file to disk, give it its mode, rename it over the target, sync the folder."""
        if self.done:
            return
        try:
            fd = os.open(self.temp, os.O_RDONLY)
            try:
                os.fsync(fd)
                if stat.S_IMODE(os.fstat(fd).st_mode) != self.mode:  # the writer made the file again, or chmod'ed it
                    os.fchmod(fd, self.mode)
            finally:
                os.close(fd)
            os.replace(self.temp, self.target)
        except BaseException:
            self.discard()
            raise
        self.done = True
        _sync_folder(self.target.parent)

    def discard(self) -> None:
        """Remove the temporary file (nothing when it was committed or is gone)."""
        if not self.done:
            self.done = True
            with contextlib.suppress(OSError):
                os.unlink(self.temp)


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (not every file system can: then nothing)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def stage(path: str | os.PathLike[str], data: bytes | None = None) -> Staged:
    """A temporary file beside ``path`` holding ``data`` (empty when None), with the mode ``open(path, "w")``
    would give ``path``.

    ``path``'s folder must exist (as for ``open``). Write the temporary file (``staged.temp``) if need be, then
    :meth:`Staged.commit` it, or :meth:`Staged.discard` it on failure."""
    target = Path(path)
    old_mode = None
    with contextlib.suppress(OSError):
        st = os.stat(target, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            old_mode = stat.S_IMODE(st.st_mode) & 0o777
    while True:
        temp = target.parent / f".{target.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        try:  # the kernel applies the umask (and a default ACL) exactly as for open(path, "w")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        break
    try:
        if old_mode is not None:
            os.fchmod(fd, old_mode)
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        view = memoryview(data or b"")
        while view:
            view = view[os.write(fd, view) :]
        if data:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    os.close(fd)
    return Staged(temp, target, mode)


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that needs a file name; renamed over ``path`` when the block
    ends without an error, removed when it raises (Ctrl-C included)::

        with writing(folder / "adapter_model.safetensors") as temp:
            save_file(tensors, temp)
    """
    staged = stage(path)
    try:
        yield staged.temp
    except BaseException:
        staged.discard()
        raise
    staged.commit()


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module's notes)."""
    stage(path, data).commit()


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    write_bytes(path, text.encode(encoding))


def append_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Add ``text`` at the end of ``path`` (made if missing), atomically: the file is the old one or the old one
    followed by ``text``, never a part of it (the whole file is rewritten: for logs of modest size)."""
    path = Path(path)
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = b""
    write_bytes(path, old + text.encode(encoding))


def save_figure(fig: Any, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """``fig.savefig(path, **kwargs)`` atomically (the format from ``path``'s suffix unless ``format`` is given)."""
    kwargs.setdefault("format", Path(path).suffix.lstrip(".") or "png")
    buffer = io.BytesIO()
    fig.savefig(buffer, **kwargs)
    write_bytes(path, buffer.getvalue())


def copy_file(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Copy the bytes of ``source`` to ``path`` atomically (``path`` gets the mode a new file gets, not
    ``source``'s)."""
    with writing(path) as temp, open(source, "rb") as reader, open(temp, "wb") as handle:
        shutil.copyfileobj(reader, handle, 1 << 20)


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: ``/proc/self/status``); elsewhere it is set and put
    back at once, which another thread creating a file at that instant could see."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/self/status", encoding="ascii") as status:
            return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    umask = os.umask(0o077)
    os.umask(umask)
    return umask


def set_default_modes(folder: str | os.PathLike[str]) -> None:
    """Give ``folder`` and everything under it the modes ``mkdir`` and ``open(path, "w")`` would give under the
    umask (``0o777``/``0o666`` minus it): for a folder written privately (``mkdtemp``, third-party writers that
    write through private temporaries) before it is renamed into place."""
    umask = current_umask()
    folder = Path(folder)
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


# ------------------------------------------------------------------------------------------------ strict JSON


def first_non_json(value: Any, field: str = "", *, other_types: bool = False) -> tuple[str, str] | None:
    """The first place in ``value`` that strict JSON cannot hold, as ``(field path, what is there)``, or None.

    Non-finite floats (numpy's included) and values that are not str, int, float, bool, None, list, tuple or dict
    with str keys are reported (values of other types are passed over with ``other_types``: a ``default`` function
    converts them); ``field`` is the path's prefix (``provenance.scores.search``, ``[3]``)."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (field or "(the value)", repr(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return (field or "(the value)", f"a key of type {type(key).__name__} ({key!r})")
            found = first_non_json(item, f"{field}.{key}" if field else key, other_types=other_types)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = first_non_json(item, f"{field}[{index}]", other_types=other_types)
            if found:
                return found
        return None
    if isinstance(value, np.floating) and not np.isfinite(value):
        return (field or "(the value)", repr(float(value)))
    if other_types:
        return None
    return (field or "(the value)", f"a {type(value).__name__} ({value!r:.60})")


def null_non_finite(obj: Any) -> Any:
    """A JSON-ready copy for records whose schema stores a missing number as null: NaN and infinities become None,
    numpy scalars and arrays plain Python values, paths strings (use it only where null is allowed; elsewhere
    :func:`dumps_json` refuses the non-finite value, naming its field)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): null_non_finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [null_non_finite(v) for v in obj]
    if isinstance(obj, np.generic):
        return null_non_finite(obj.item())
    if isinstance(obj, np.ndarray):
        return null_non_finite(obj.tolist())
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dumps_json(
    value: Any,
    *,
    where: str | os.PathLike[str] = "JSON",
    field: str = "",
    indent: int | None = None,
    default: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> str:
    """``json.dumps(value, allow_nan=False, ...)``; a NaN or an infinity (numpy's too) anywhere in ``value``, or
    (without ``default``) a value of a type JSON cannot hold, raises :class:`~rope_adapter.errors.NotJsonError`
    naming ``where`` (the file or the argument) and the field.

    ``field`` prefixes the field path in the message (``provenance``); ``default`` converts values of other types
    (as in ``json.dumps``; a non-finite number it returns is refused too); ``kwargs`` go to ``json.dumps``
    (``sort_keys``, ``ensure_ascii``; never ``allow_nan``)."""
    if "allow_nan" in kwargs:
        raise TypeError("dumps_json writes strict JSON: allow_nan cannot be given")
    found = first_non_json(value, field, other_types=default is not None)
    if found is not None:
        raise NotJsonError(os.fspath(where), *found)
    try:
        return json.dumps(value, allow_nan=False, indent=indent, default=default, **kwargs)
    except ValueError as exc:  # a non-finite number from ``default``
        raise NotJsonError(
            os.fspath(where), field or "(the value)", f"converted to a non-finite number ({exc})"
        ) from exc


def write_json(
    path: str | os.PathLike[str], value: Any, *, indent: int | None = 1, newline: bool = True, **kwargs: Any
) -> None:
    """Write ``value`` as strict JSON (:func:`dumps_json`) to ``path`` atomically, with a final newline."""
    write_text(path, dumps_json(value, where=path, indent=indent, **kwargs) + ("\n" if newline else ""))


# ------------------------------------------------------------------------------------------------ folders

WEIGHT_FORMATS: dict[str, tuple[str, ...]] = {
    "adapter": ("adapter_model.safetensors", "adapter_model.bin"),
    "model": (
        "model.safetensors",
        "model.safetensors.index.json",
        "model-?????-of-?????.safetensors",
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
        "pytorch_model-?????-of-?????.bin",
    ),
}
"""File name patterns of the weights of a PEFT adapter and of a transformers model, in every format they are saved
in (safetensors and pickle, one file or shards with an index)."""


def clear_other_formats(
    folder: str | os.PathLike[str],
    kind: str,
    keep: Collection[str],
    ours: Callable[[Path], bool],
    *,
    dry_run: bool = False,
) -> list[Path]:
    """Remove the weight files of ``kind`` (a key of :data:`WEIGHT_FORMATS`) in ``folder`` that are not in
    ``keep`` (names the save just wrote): the leftovers of a previous save in another format, which a loader might
    read instead of the new files.

    Only files ``ours(path)`` recognises as written by a save of the same kind of adapter or model are removed;
    any other raises :class:`~rope_adapter.errors.FolderFormatError` before anything is removed, naming them.
    With ``dry_run`` nothing is removed (the check a save makes before it writes). Returns the files (to be)
    removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = sorted({p for pattern in WEIGHT_FORMATS[kind] for p in folder.glob(pattern) if p.name not in keep})
    foreign = [p for p in found if not (p.is_file() and not p.is_symlink() and ours(p))]
    if foreign:
        raise FolderFormatError(
            f"{folder} holds {', '.join(p.name for p in foreign)}, weights in another format that rope-adapter did "
            f"not write; a loader could read them instead of the new {', '.join(sorted(keep))}: move them away or "
            f"save into another folder"
        )
    if not dry_run:
        for path in found:
            path.unlink(missing_ok=True)
        if found:
            _sync_folder(folder)
    return found
