"""The adapter on the real SmolLM2-135M-Instruct (fetched once from PyPI, see rope_adapter.embedded)."""

from __future__ import annotations

import copy
from argparse import Namespace

import pytest
import torch
from peft import PeftModel, get_peft_model

import rope_adapter
from rope_adapter import LrsConfig
from rope_adapter.cli.demo import SMOLLM2_REFERENCE, reference_adapter

pytestmark = pytest.mark.integration


def test_smollm2_ones_exact_nonuniform_changes_round_trip(smollm2, tmp_path):
    base, tokenizer = smollm2
    text = 'JSON data:\n{"a1b2": "c3d4", "e5f6": "0718"}\n\nKey: "e5f6"\nCorresponding value:'
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.inference_mode():
        plain = base(ids).logits
    assert base.config.num_hidden_layers == 30

    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=[1.0] * 30))
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, plain)

    factors = [1.0 + 0.5 * i / 29 for i in range(30)]
    rope_adapter.set_factors(model, factors)
    with torch.inference_mode():
        scaled = model(ids).logits
    assert (scaled - plain).abs().max() > 1e-3

    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(copy.deepcopy(base), tmp_path / "adapter")
    assert rope_adapter.get_factors(reloaded) == pytest.approx(factors, abs=1e-6)
    with torch.inference_mode():
        assert torch.equal(reloaded(ids).logits, scaled)
        with reloaded.disable_adapter():
            assert torch.equal(reloaded(ids).logits, plain)


def test_the_demo_evaluates_the_shipped_full_search_adapter_on_smollm2(smollm2):
    """`rope-adapter demo` on the default model picks the shipped adapter of the full SmolLM2 search by default
    (by alias or Hub id), it fits the real model, and it loads as any LRS adapter does."""
    base, _ = smollm2
    for name in ("smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        assert reference_adapter(Namespace(model=name, reference_adapter=None)) == SMOLLM2_REFERENCE
    assert reference_adapter(Namespace(model="smollm2-135m-instruct", reference_adapter="none")) is None
    loaded = PeftModel.from_pretrained(copy.deepcopy(base), SMOLLM2_REFERENCE)
    shipped = rope_adapter.load_lrs_config(SMOLLM2_REFERENCE).factors
    assert rope_adapter.get_factors(loaded) == pytest.approx(shipped, abs=1e-6)
