"""lm-evaluation-harness (PyPI ``lm_eval``) on LRS adapters: ``rope-adapter-lm-eval`` and :func:`hflm`.

``lm_eval --model hf --model_args pretrained=BASE,peft=ADAPTER`` calls ``PeftModel.from_pretrained`` in a process
that never imported ``rope_adapter``, so PEFT does not know the "LRS" type. ``rope-adapter-lm-eval`` is lm_eval's
own command line (the same flags, the same output) run after ``import rope_adapter``; :func:`hflm` builds lm_eval's
``HFLM`` around an adapted model for ``lm_eval.simple_evaluate``. An exported folder (``rope-adapter export``)
needs neither: plain ``lm_eval`` loads it with ``trust_remote_code=True``.

lm_eval is an optional dependency: ``pip install "rope-adapter[harness]"``. Nothing else in the package imports
this module, so ``import rope_adapter`` never imports lm_eval.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

import rope_adapter  # noqa: F401 - registers the PEFT type "LRS" before lm_eval loads any adapter
from rope_adapter.embedded.loading import resolve_model_path
from rope_adapter.errors import LrsError

PROG = "rope-adapter-lm-eval"
INSTALL_HINT = 'pip install "rope-adapter[harness]"'


class HarnessMissingError(LrsError, ImportError):
    """lm-evaluation-harness (``lm_eval``) is not installed; the message names the command that installs it."""


def _require_lm_eval() -> Any:
    """The imported ``lm_eval`` package, or :class:`HarnessMissingError` saying how to install it."""
    try:
        import lm_eval  # an optional extra: imported only here
    except ImportError as exc:
        raise HarnessMissingError(
            f"lm-evaluation-harness is not installed (import lm_eval failed: {exc}). Install it with: {INSTALL_HINT}"
        ) from exc
    return lm_eval


def _cli_entry() -> Any:
    """lm_eval's console-script function (``lm_eval.__main__:cli_evaluate`` in 0.4.x); it reads ``sys.argv``."""
    _require_lm_eval()
    try:
        from lm_eval.__main__ import cli_evaluate  # an optional extra, like lm_eval above
    except ImportError as exc:
        raise HarnessMissingError(
            f"this lm_eval has no lm_eval.__main__.cli_evaluate ({exc}); rope-adapter needs lm_eval 0.4.x: "
            f'pip install "lm_eval>=0.4.5,<0.5"'
        ) from exc
    return cli_evaluate


def main(argv: Sequence[str] | None = None) -> int:
    """Run lm_eval's command line with the LRS PEFT type registered; returns the exit status.

    ``argv`` is lm_eval's argument list (default ``sys.argv[1:]``), e.g.
    ``["--model", "hf", "--model_args", "pretrained=BASE,peft=ADAPTER", "--tasks", "hellaswag"]``.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cli_evaluate = _cli_entry()
    except HarnessMissingError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = [PROG, *args]  # lm_eval 0.4.x parses sys.argv itself (and inserts its "run" subcommand there)
    try:
        cli_evaluate()
    except SystemExit as exc:  # argparse errors, --help, and lm_eval's own sys.exit calls
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved
    return 0


def hflm(
    base: str | os.PathLike[str],
    adapter: str | os.PathLike[str],
    *,
    dtype: Any = None,
    device: str | None = None,
    tokenizer: Any = None,
    **kwargs: Any,
) -> Any:
    """lm_eval's ``HFLM`` around ``PeftModel.from_pretrained(base, adapter)``, for ``lm_eval.simple_evaluate``.

    Args:
        base: the base model (Hub id, local folder, or an embedded alias such as ``smollm2-135m-instruct``).
        adapter: the LRS adapter folder or Hub repo id.
        dtype: passed to ``AutoModelForCausalLM.from_pretrained`` (default: the checkpoint's dtype).
        device: where to put the model (default: CUDA when available, else CPU).
        tokenizer: a tokenizer object or name (default: the base model's).
        kwargs: passed to ``HFLM`` (``batch_size``, ``max_length``, ``add_bos_token``, ...).

    Unlike ``--model_args peft=...``, the model's embeddings are never resized to the tokenizer's length.
    """
    _require_lm_eval()
    from lm_eval.models.huggingface import HFLM  # lm_eval is an optional extra

    base_path = resolve_model_path(base)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype="auto" if dtype is None else dtype)
    model = PeftModel.from_pretrained(model, os.fspath(adapter)).eval()
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if tokenizer is None or isinstance(tokenizer, str | os.PathLike):
        tokenizer = AutoTokenizer.from_pretrained(os.fspath(tokenizer) if tokenizer is not None else base_path)
    return HFLM(pretrained=model, tokenizer=tokenizer, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
