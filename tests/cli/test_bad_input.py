"""Bad input gets a clear error before any work, and nothing is changed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import save_file
from testkit.adapter_files import edit_adapter_config
from testkit.tiny_models import tiny_model
from torch import nn

import rope_adapter
from rope_adapter import (
    AdapterFileError,
    AdapterMismatchError,
    InvalidFactorsError,
    LrsConfig,
    UnsupportedModelError,
    count_layer_hooks,
)

IDS = torch.randint(3, 250, (1, 40), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    ("factors", "match"),
    [
        ([1.0, 1.0, 1.0], "3 factors for a model with 4 decoder layers"),
        ([1.0, math.nan, 1.0, 1.0], "finite and > 0"),
        ([1.0, math.inf, 1.0, 1.0], "finite and > 0"),
        ([1.0, 0.0, 1.0, 1.0], "finite and > 0"),
        ([1.0, -1.5, 1.0, 1.0], "finite and > 0"),
        (-2.0, "finite and > 0"),
        (["a", 1, 1, 1], "must be numbers"),
    ],
)
def test_bad_factors_are_refused_and_the_model_is_untouched(factors, match):
    base = tiny_model("llama")
    before = base(IDS).logits
    with pytest.raises(InvalidFactorsError, match=match):
        get_peft_model(base, LrsConfig(factors=factors))
    assert count_layer_hooks(base) == 0
    assert not any(isinstance(m, rope_adapter.LrsRotaryLayer) for m in base.modules())
    assert torch.equal(base(IDS).logits, before)


def test_set_factors_validates_before_changing_anything():
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=1.2))
    with pytest.raises(InvalidFactorsError):
        rope_adapter.set_factors(model, [1.0, float("nan"), 1.0, 1.0])
    assert rope_adapter.get_factors(model) == pytest.approx([1.2] * 4)


class NoRope(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4)])


class LayerWithoutPositionEmbeddings(nn.Module):
    def forward(self, hidden_states):
        return hidden_states


class RopeButOldLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = tiny_model("llama").model.rotary_emb
        self.layers = nn.ModuleList([LayerWithoutPositionEmbeddings()])


def test_models_without_rope_or_position_embeddings_are_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100))
    with pytest.raises(UnsupportedModelError, match="no rotary position embedding.*tested on llama"):
        get_peft_model(gpt2, LrsConfig(factors=1.0))
    with pytest.raises(UnsupportedModelError, match="no rotary"):
        rope_adapter.find_rope_site(NoRope())
    with pytest.raises(UnsupportedModelError, match="does not take `position_embeddings`"):
        rope_adapter.find_rope_site(RopeButOldLayers())


@pytest.fixture
def adapter_dir(tmp_path: Path) -> Path:
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=[1.0, 1.2, 1.4, 1.6]))
    model.save_pretrained(tmp_path / "ad")
    return tmp_path / "ad"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"num_hidden_layers": 6}, "made for a model with 4 decoder layers, this llama model has 6"),
        ({"head_dim": 32}, "made for head size 16"),
    ],
)
def test_adapter_for_another_model_is_refused(adapter_dir, overrides, match):
    other = tiny_model("llama", **overrides)
    before = other(IDS).logits
    with pytest.raises(AdapterMismatchError, match=match):
        PeftModel.from_pretrained(other, adapter_dir)
    assert count_layer_hooks(other) == 0
    assert torch.equal(other(IDS).logits, before)


def test_adapter_for_other_rope_settings_is_refused(adapter_dir):
    other = tiny_model("llama", rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0})
    with pytest.raises(AdapterMismatchError, match="RoPE settings"):
        PeftModel.from_pretrained(other, adapter_dir)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: (d / "adapter_config.json").write_text("{not json"), "not valid JSON"),
        (lambda d: edit_adapter_config(d, factors=[1.0, 1.2, 1.4, 9.0]), "disagree on the factors"),
        (lambda d: edit_adapter_config(d, factors=[1.0, 1.2, -1.4, 1.6]), "finite and > 0"),
        (lambda d: edit_adapter_config(d, factors=[1.0, 1.2]), "2 factors"),
        (lambda d: edit_adapter_config(d, num_layers="four"), "positive integer"),
        (lambda d: edit_adapter_config(d, surprise=1), "unknown keys"),
        (lambda d: edit_adapter_config(d, factors=None), "lacks 'factors'"),
    ],
)
def test_corrupt_adapter_config_is_refused(adapter_dir, edit, match):
    edit(adapter_dir)
    with pytest.raises((AdapterFileError, InvalidFactorsError, ValueError), match=match):
        rope_adapter.read_adapter_factors(adapter_dir)


@pytest.mark.parametrize(
    ("tensors", "match"),
    [
        ({"base_model.model.model.rotary_emb.lrs_factors": torch.tensor([1.0, 1.2, 1.4, 1.6]).half()}, "float32"),
        ({"base_model.model.model.rotary_emb.lrs_factors": torch.tensor([1.0, 1.2, 1.4])}, r"shape \[4\]"),
        ({"base_model.model.model.rotary_emb.other": torch.tensor([1.0, 1.2, 1.4, 1.6])}, "exactly one"),
        ({"base_model.model.model.rotary_emb.lrs_factors": torch.tensor([1.0, 1.2, 1.4, 1.7])}, "disagree"),
    ],
)
def test_corrupt_safetensors_is_refused_by_peft_loading_too(adapter_dir, tensors, match):
    save_file(tensors, adapter_dir / "adapter_model.safetensors")
    with pytest.raises(AdapterFileError, match=match):
        rope_adapter.read_adapter_factors(adapter_dir)
    with pytest.raises(AdapterFileError, match=match):
        PeftModel.from_pretrained(tiny_model("llama"), adapter_dir)


def test_truncated_safetensors_file(adapter_dir):
    path = adapter_dir / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(AdapterFileError, match="not a readable safetensors"):
        rope_adapter.read_adapter_factors(adapter_dir)


def test_not_an_adapter_folder(tmp_path):
    with pytest.raises(AdapterFileError, match="no adapter_config.json"):
        rope_adapter.load_lrs_config(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(AdapterFileError, match="not an LRS adapter"):
        rope_adapter.load_lrs_config(tmp_path)
