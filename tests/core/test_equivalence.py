"""Numerical semantics of the LRS adapter on every supported architecture."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import get_peft_model
from testkit.tiny_models import ARCHITECTURES, capture_position_embeddings, native_linear, tiny_model, weights_in

import rope_adapter
from rope_adapter import LrsConfig

IDS = torch.randint(3, 250, (2, 96), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_uniform_factor_equals_native_linear_scaling(arch):
    base = tiny_model(arch)
    reference = native_linear(base, 1.37)(IDS).logits
    plain = base(IDS).logits
    assert (reference - plain).abs().max() > 1e-2, "the test model must be sensitive to RoPE scaling"
    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=1.37))
    assert torch.equal(model(IDS).logits, reference)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_uniform_factor_equals_native_linear_scaling_in_bfloat16(arch):
    base = tiny_model(arch)
    reference = weights_in(native_linear(base, 1.37), torch.bfloat16)(IDS).logits
    model = get_peft_model(weights_in(copy.deepcopy(base), torch.bfloat16), LrsConfig(factors=1.37))
    assert torch.equal(model(IDS).logits, reference)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_ones_and_disabled_adapter_equal_the_plain_model(arch):
    base = tiny_model(arch)
    plain = base(IDS).logits
    n = base.config.num_hidden_layers
    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=[1.0] * n))
    assert torch.equal(model(IDS).logits, plain)
    rope_adapter.set_factors(model, [1.0 + 0.3 * i for i in range(n)])
    scaled = model(IDS).logits
    assert (scaled - plain).abs().max() > 1e-2
    with model.disable_adapter():
        assert torch.equal(model(IDS).logits, plain)
    assert torch.equal(model(IDS).logits, scaled)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text", "gpt_neox"])
def test_each_layer_rotates_with_its_own_factor(arch):
    """Independent reference: cos(pos * inv_freq / s_l) from the config, per layer (and per layer type)."""
    base = tiny_model(arch)
    n = base.config.num_hidden_layers
    factors = [1.0, 1.5, 2.0, 3.25][:n]
    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=factors))
    with capture_position_embeddings(rope_adapter.find_rope_site(model).layers) as seen:
        model(IDS[:, :40])
    cfg = base.config
    head = cfg.head_dim if getattr(cfg, "head_dim", None) else cfg.hidden_size // cfg.num_attention_heads
    rot = int(head * cfg.rope_parameters.get("partial_rotary_factor", 1.0)) if arch != "gemma3_text" else head
    pos = torch.arange(40, dtype=torch.float64)
    for layer, s in enumerate(factors):
        if arch == "gemma3_text":
            theta = cfg.rope_parameters[cfg.layer_types[layer]]["rope_theta"]
        else:
            theta = cfg.rope_parameters["rope_theta"]
        inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
        expected = torch.cos(torch.outer(pos, inv / s))
        got = seen[layer][0][0, :, : rot // 2].double()
        torch.testing.assert_close(got, expected, atol=2e-4, rtol=0)


ROPE_TYPES = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "longrope": {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.1 * i for i in range(8)],
        "long_factor": [2.0 + 0.2 * i for i in range(8)],
        "original_max_position_embeddings": 64,
    },
}


@pytest.mark.parametrize("rope_type", sorted(ROPE_TYPES))
def test_stacking_on_a_rope_type_divides_its_inv_freq_and_keeps_its_attention_scaling(rope_type):
    """Semantics (A): layer l uses inv_freq_type / s_l with the type's attention scaling, checked against
    transformers' ROPE_INIT_FUNCTIONS computed independently (dynamic: at the sequence length in use)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_theta": 100.0, **ROPE_TYPES[rope_type]}
    base = tiny_model("llama", rope_parameters=params, max_position_embeddings=128)
    assert base.config.rope_parameters["rope_type"] == rope_type
    factors = [1.0, 1.25, 1.5, 2.0]
    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=factors))
    seq = 200 if rope_type in ("dynamic", "longrope") else 60  # beyond 128 positions: dynamic updates inv_freq
    ids = torch.randint(3, 250, (1, seq), generator=torch.Generator().manual_seed(1))
    with capture_position_embeddings(rope_adapter.find_rope_site(model).layers) as seen:
        model(ids)
    kwargs = {"seq_len": seq} if rope_type in ("dynamic", "longrope") else {}
    inv, attention = ROPE_INIT_FUNCTIONS[rope_type](base.config, None, **kwargs)
    if rope_type == "dynamic":  # the reference really is the updated (long-context) frequency vector
        assert not torch.allclose(inv, base.model.rotary_emb.original_inv_freq)
    pos = torch.arange(seq, dtype=torch.float32)
    for layer, s in enumerate(factors):
        expected = torch.cos(torch.outer(pos, inv.float() / s)) * attention
        torch.testing.assert_close(seen[layer][0][0, :, : inv.numel()], expected, atol=1e-4, rtol=1e-4)
    if rope_type == "linear":
        assert torch.equal(
            get_peft_model(copy.deepcopy(base), LrsConfig(factors=1.5))(ids).logits,
            native_linear(base, 1.5)(ids).logits,
        )
