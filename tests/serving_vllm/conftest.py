"""The vLLM tests run in their own venv (``make test-vllm``: vLLM pins its own torch and transformers). Where vLLM
is not installed, as in the main venv, nothing here is collected."""

from __future__ import annotations

import importlib.util
import os

collect_ignore_glob = [] if importlib.util.find_spec("vllm") else ["test_*.py"]

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: errors reach the test
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine (vLLM's CPU default is 4)
