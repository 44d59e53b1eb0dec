"""The adapter on the real SmolLM2-135M-Instruct (fetched once from PyPI, see rope_adapter.embedded)."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import PeftModel, get_peft_model

import rope_adapter
from rope_adapter import LrsConfig

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
