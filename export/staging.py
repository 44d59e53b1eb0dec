"""Where an export is built before it appears under ``out``: a hidden ``.OUT.tmp-*`` folder beside it, renamed
into place by :func:`publish` once written and verified; also the checks made before any work.

A folder left by a killed export (SIGKILL, power loss) is marked with its owner's process id; the next export to
the same ``out`` removes it once that process is gone. SIGTERM (sent by ``timeout`` and job schedulers) is
turned into an interruption while an export runs, so the temporary folder is removed as on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from huggingface_hub.serialization._base import parse_size_to_int

from rope_adapter import files
from rope_adapter.errors import LrsError
from rope_adapter.numbers import as_int, as_real
from rope_adapter.records import read_json


class ExportError(LrsError):
    """An export that cannot be done as asked (output folder, base model, adapter)."""


class ExportVerificationError(ExportError):
    """The written folder, loaded in a fresh process, does not give the adapter's logits."""


OWNER_FILE = ".rope-adapter-export-owner"
"""Inside a temporary export folder while it is being written: {"pid": ..., "host": ...}. Removed before publishing."""


class ExportTerminated(KeyboardInterrupt):
    """SIGTERM arrived during an export; handled like Ctrl-C (the temporary folder is removed)."""


def temporary_prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


def make_temporary(out: Path) -> Path:
    """A new private temporary folder beside ``out``, marked with this process as its owner."""
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(out), dir=out.parent))
    files.write_json(tmp / OWNER_FILE, {"pid": os.getpid(), "host": socket.gethostname()}, indent=None)
    return tmp


def release_owner_mark(tmp: Path) -> None:
    (tmp / OWNER_FILE).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Remove the temporary folders of earlier exports to ``out`` whose process (on this host) has ended."""
    removed = []
    if not out.parent.is_dir():
        return removed
    for item in out.parent.glob(temporary_prefix(out) + "*"):
        try:
            owner = read_json(item / OWNER_FILE)
            pid, host = int(owner["pid"]), str(owner["host"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours, or not readable: leave it
        if host != socket.gethostname() or pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(item, ignore_errors=True)
        removed.append(item)
    return removed


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises ExportTerminated (a KeyboardInterrupt) in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise ExportTerminated(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent() -> None:
    """``preexec_fn`` of the verification child: on Linux it gets SIGKILL when the export process dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def check_export_options(
    atol: Any, max_shard_size: Any, probe_length: Any = 64
) -> tuple[float | None, int | str | None, int]:
    """Refuse a negative or NaN tolerance, a shard size save_pretrained cannot read and a probe of no tokens,
    before any work; returns them as the export uses them (numbers of any type as Python numbers, a
    digits-only shard size as a number of bytes)."""
    atol = as_real(
        atol, "--atol", error=ExportError, low=0, optional=True, finite=False,
        hint=" (the largest logit difference accepted)",
    )  # fmt: skip
    if atol is not None and not math.isfinite(atol):
        raise ExportError(f"--atol must be finite, got {atol!r}: use --no-verify to skip the check")
    probe_length = as_int(probe_length, "probe_length", error=ExportError, low=1)
    if max_shard_size is None:
        return atol, None, probe_length
    if isinstance(max_shard_size, str) and max_shard_size.strip().isdigit():
        max_shard_size = int(max_shard_size)
    if isinstance(max_shard_size, str):
        try:
            size = parse_size_to_int(max_shard_size)
        except (ValueError, TypeError) as exc:
            raise ExportError(
                f"--max-shard-size {max_shard_size!r} is not a size: give a number of bytes or e.g. 500MB, 5GB"
            ) from exc
    else:
        size = max_shard_size = as_int(max_shard_size, "--max-shard-size", error=ExportError)
    if size <= 0:
        raise ExportError(f"--max-shard-size must be > 0, got {max_shard_size!r}")
    return atol, max_shard_size, probe_length


def publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished folder into place (replacing an old one only with ``overwrite``)."""
    files.set_default_modes(tmp)  # mkdtemp made it private, and so are some files written through temporaries
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:  # appeared while we were writing
            raise ExportError(f"--out {out} was filled by someone else during the export; nothing was replaced")
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        if out.is_dir():
            out.rmdir()
        os.replace(tmp, out)
