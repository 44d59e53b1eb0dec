"""Where an export is built before it appears under ``out``: a hidden ``.OUT.tmp-*`` folder beside it.

A folder left by a killed export (SIGKILL, power loss) is marked with its owner's process id; the next export to
the same ``out`` removes it once that process is gone. SIGTERM (sent by ``timeout`` and job schedulers) is
turned into an interruption while an export runs, so the temporary folder is removed as on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from rope_adapter.errors import LrsError


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
    (tmp / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
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
            owner = json.loads((item / OWNER_FILE).read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours, or not readable: leave it
        if host != socket.gethostname() or pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(item, ignore_errors=True)
        removed.append(item)
    return removed


def check_writable(folder: Path, what: str) -> str | None:
    """Why nothing can be written under ``folder`` (made if missing), or None: the nearest existing ancestor must
    be a folder where a small file can be written and flushed (catches read-only and full file systems)."""
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
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
