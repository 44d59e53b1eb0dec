"""Loading a model for scoring, one way for the search and the evaluation: device and dtype names, the config
without the weights, the tokenizer (given a pad token when it has none) and the model in eval mode. Embedded
model names (``smollm2-135m-instruct``, ``qwen2.5-coder-0.5b-instruct``) resolve to their converted folders."""

from __future__ import annotations

import os
from typing import Any, TypedDict

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from rope_adapter.embedded.loading import resolve_model_path
from rope_adapter.errors import LrsError

from ..errors import first_line


class EvalError(LrsError):
    """Bad evaluation input (task options, sample counts, data, positions); raised before the model loads."""


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str | torch.dtype, device: str | torch.device | None = None) -> torch.dtype:
    """``"float32"``, ``"bfloat16"``, ``"float16"`` (or a torch dtype) as a torch dtype; ``"auto"`` is bfloat16 on
    CUDA and float32 elsewhere (CPUs without native bfloat16 run it several times slower)."""
    if isinstance(name, torch.dtype):
        return name
    if str(name) == "auto":
        return torch.bfloat16 if device is not None and torch.device(str(device)).type == "cuda" else torch.float32
    try:
        return DTYPES[str(name).replace("torch.", "")]
    except KeyError:
        raise EvalError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}") from None


def cpu_bfloat16_flags(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> dict[str, bool] | None:
    """``{"amx_bf16": ..., "avx512_bf16": ...}``: the CPU instructions that run bfloat16 matmuls natively, read from
    ``cpuinfo``; None where it cannot be read (not Linux), so that nobody is told anything on a guess."""
    try:
        with open(cpuinfo) as handle:
            flags = set(handle.read().split())
    except OSError:
        return None
    return {"amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags}


def _has_amx() -> bool:
    amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(amx()) if amx is not None else False
    except Exception:  # a private torch probe: never let it stop a run
        return False


def bfloat16_hint(dtype: str, device: str | torch.device | None) -> str | None:
    """A note on the dtype of a CPU run, or None where there is nothing to say (any GPU run):

    - float32 (or ``auto``) on a CPU whose AMX tiles make bfloat16 several times faster (measured 4.3x on a
      3.5k-token Qwen record, with the same teacher-forced verdicts on 158 of 160 samples:
      benchmarks/results/dtype_agreement_qwen_50pairs/). ``auto`` stays float32 on CPUs, so that a study's dtype
      does not depend on the machine it resumes on;
    - bfloat16 on a CPU with neither AMX nor AVX512-BF16, where its matmuls are emulated and ran 4.7x slower than
      float32 (benchmarks/results/dtype_speed_no_amx/dtype_speed_no_amx.json).
    """
    if resolve_device(device).type != "cpu":
        return None
    try:
        resolved = resolve_dtype(dtype, "cpu")  # "auto" is float32 on a CPU
    except EvalError:
        return None
    if resolved == torch.float32:
        if not _has_amx():
            return None
        return (
            "note: this CPU has AMX: --dtype bfloat16 scores about 4x faster than float32 here, with near-equal "
            "verdicts"
        )
    if resolved == torch.bfloat16:
        flags = cpu_bfloat16_flags()
        if flags is None or any(flags.values()) or _has_amx():
            return None
        return (
            "note: this CPU has neither AMX nor AVX512-BF16: bfloat16 runs emulated here, 4.7x slower than float32 "
            "on such a CPU (benchmarks/dtype_speed.py times yours); --dtype float32 is likely faster"
        )
    return None


def resolve_device(name: str | torch.device | None) -> torch.device:
    """``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``..."""
    if name is None or str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(str(name))
    except RuntimeError:
        raise EvalError(f"unknown device {str(name)!r}; use cpu, cuda, cuda:N, mps or auto") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise EvalError(f"device {name!r} requested but CUDA is not available here; use --device cpu")
    return device


def load_model_config(name_or_path: str | os.PathLike[str]) -> tuple[str, Any]:
    """(resolved path, config) of a model, without its weights (``smollm2-135m-instruct`` is the embedded one)."""
    path = resolve_model_path(name_or_path)
    text = str(path)
    looks_local = text.startswith(("/", ".", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text
    if looks_local and not os.path.exists(os.path.expanduser(text)):
        raise EvalError(
            f"model folder {str(name_or_path)!r} does not exist; give a model folder, a Hub id (org/name) or an "
            "embedded model's name (smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct)"
        )
    try:
        return path, AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:  # ValueError: a config.json without a known model_type
        first = first_line(exc)
        raise EvalError(f"cannot read the model config of {str(name_or_path)!r}: {first}") from None


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The model's tokenizer (a pad token is set to EOS when the tokenizer has none)."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class _ModelOptions(TypedDict, total=False):
    """What :func:`load_model` passes to ``from_pretrained``."""

    dtype: torch.dtype
    attn_implementation: str
    device_map: str


def load_model(
    name_or_path: str | os.PathLike[str] = "smollm2-135m-instruct",
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device | None = "cpu",
    attn_implementation: str | None = None,
    device_map: str | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
) -> tuple[torch.nn.Module, Any]:
    """(model in eval mode, tokenizer) from a local folder, Hub id or an embedded model's name: the one loader of
    search and evaluation. ``device_map`` (e.g. ``"auto"``) is passed to ``from_pretrained`` instead of moving the
    model to ``device``; ``tokenizer`` names another tokenizer (default: the model's)."""
    path = resolve_model_path(name_or_path)
    kwargs: _ModelOptions = {"dtype": resolve_dtype(dtype)}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if device_map:
        kwargs["device_map"] = device_map
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if not device_map:
        model.to(resolve_device(device))
    model.eval()
    return model, load_tokenizer(resolve_model_path(tokenizer) if tokenizer else path)
