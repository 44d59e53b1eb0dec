"""Fixtures of the eval tests: a tiny Llama adapter folder, a perplexity text and a guard that no model loads.
Each module sets ``tiny_llama_layers`` itself (to :data:`testkit.eval_fixtures.LAYERS` where it uses these)."""

from __future__ import annotations

import numpy as np
import pytest
from peft import get_peft_model
from testkit.eval_fixtures import LAYERS, WORDS
from testkit.tiny_models import tiny_model

from rope_adapter import LrsConfig
from rope_adapter.evaluate import evaluation as ev


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adapter")
    peft_model = get_peft_model(tiny_model("llama", num_layers=LAYERS), LrsConfig(factors=[1.0, 1.3, 1.8]))
    peft_model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("text") / "book.txt"
    path.write_text(" ".join(rng.choice(WORDS, size=2400)))  # ~12k byte tokens
    return path


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if the model's weights are loaded."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although the input was bad")

    monkeypatch.setattr(ev, "load_model", refuse)
