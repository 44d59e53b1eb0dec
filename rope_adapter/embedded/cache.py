"""The cache folders: rope-adapter's own (embedded models, with its lock and temporaries) and the Hugging Face Hub
client's (read only, to know whether a Hub copy is there). No Hub code is imported."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from rope_adapter import files

CACHE_ENV = "ROPE_ADAPTER_CACHE"

TMP_PREFIX = ".tmp-"
"""Names of the temporary files and folders made in the cache while filling it."""


def _env_path(variable: str) -> Path | None:
    """The folder an environment variable names (blank counts as unset)."""
    value = os.environ.get(variable, "").strip()
    return Path(value).expanduser() if value else None


def _user_cache() -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``."""
    return _env_path("XDG_CACHE_HOME") or Path.home() / ".cache"


def cache_dir() -> Path:
    """The user's rope-adapter cache: ``$ROPE_ADAPTER_CACHE``, ``$XDG_CACHE_HOME/rope-adapter`` or
    ``~/.cache/rope-adapter`` (the first that is set). Not created here."""
    return _env_path(CACHE_ENV) or _user_cache() / "rope-adapter"


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE is set to a true value."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hf_hub_cache() -> Path:
    """The Hub client's cache folder (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if (explicit := _env_path(variable)) is not None:
            return explicit
    hf_home = _env_path("HF_HOME")
    return hf_home / "hub" if hf_home is not None else _user_cache() / "huggingface" / "hub"


def hub_copy_cached(repo_id: str) -> bool:
    """True when a snapshot of the repo with a config.json is in the local cache."""
    snapshots = hf_hub_cache() / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    return any(snapshots.glob("*/config.json"))


def say(progress: bool, message: str) -> None:
    """One progress line on stderr while the cache is filled (nothing when ``progress`` is False)."""
    if progress:
        print(f"rope-adapter: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def locked(cache: Path, progress: bool) -> Iterator[None]:
    """Hold ``<cache>/.lock`` exclusively (POSIX); a second process waits for the first to finish."""
    try:
        import fcntl  # POSIX only: kept here so that the module imports on Windows
    except ImportError:  # Windows: no advisory lock, the atomic renames still keep the cache consistent
        yield
        return
    with open(cache / ".lock", "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(progress, f"waiting for another process that is filling {cache} ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_stale_temporaries(cache: Path) -> None:
    """Remove what an interrupted run left behind. Only called with the lock held."""
    for leftover in [*cache.glob(TMP_PREFIX + "*"), *cache.glob(".*" + files.TEMP_SUFFIX)]:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
