"""Issue 11: every architecture the adapter accepts is exact (factors 1 = the plain model, a uniform factor =
transformers' native linear scaling, bit for bit), and the rest are refused before anything changes.

The nine main architectures are covered in test_equivalence.py; these are the others transformers ships with a
`rotary_emb` beside a `layers` list that build tiny (see README "Supported architectures").
"""

from __future__ import annotations

import copy

import pytest
import torch
from peft import get_peft_model
from testkit.tiny_models import capture_position_embeddings, sharpen_queries_and_keys, tiny_sizes
from transformers import AutoConfig, AutoModelForCausalLM

import rope_adapter
from rope_adapter import LrsConfig, UnsupportedModelError, count_layer_hooks

IDS = torch.randint(3, 250, (1, 48), generator=torch.Generator().manual_seed(0))

INTERLEAVED = ["cohere", "cohere2"]
EXACT = ["olmo2", "starcoder2", "stablelm", "phi", "persimmon", "nemotron", "granite", "glm", "helium", "exaone4"]
EXACT += ["smollm3", "ernie4_5", "seed_oss", "arcee", "apertus", "mixtral", "olmoe", "bitnet", "internlm3"]
REFUSED = {
    "granite_swa": "other rotary modules",
    "llama4_text": "known channel layout",
    "gpt_oss": "known channel layout",
}


def build(arch: str) -> torch.nn.Module:
    """A 2-layer random model of ``arch`` whose RoPE visibly matters (theta 100, larger q/k weights)."""
    torch.manual_seed(0)
    kw = tiny_sizes(num_layers=2)
    config = AutoConfig.for_model(arch, **kw)
    text = config.get_text_config()
    for key, value in kw.items():
        if hasattr(text, key):
            setattr(text, key, value)
    params = text.rope_parameters
    keep = {k: v for k, v in params.items() if k == "partial_rotary_factor"}
    text.rope_parameters = {**keep, "rope_type": "default", "rope_theta": 100.0}
    return sharpen_queries_and_keys(AutoModelForCausalLM.from_config(config)).eval()


def native_linear(base: torch.nn.Module, factor: float) -> torch.nn.Module:
    config = copy.deepcopy(base.config)
    config.get_text_config().rope_parameters.update(rope_type="linear", factor=factor)
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(base.state_dict())
    return model.eval()


@torch.no_grad()
@pytest.mark.parametrize("arch", INTERLEAVED + EXACT)
def test_accepted_architectures_are_exact(arch):
    base = build(arch)
    plain = base(IDS).logits
    site = rope_adapter.find_rope_site(base)
    assert site.layout == ("interleaved" if arch in INTERLEAVED else "half")
    ones = get_peft_model(copy.deepcopy(base), LrsConfig(factors=1.0))
    assert torch.equal(ones(IDS).logits, plain)
    reference = native_linear(base, 1.37)(IDS).logits
    assert (reference - plain).abs().max() > 1e-4, "the test model must be sensitive to RoPE scaling"
    uniform = get_peft_model(copy.deepcopy(base), LrsConfig(factors=1.37))
    assert torch.equal(uniform(IDS).logits, reference)


@torch.no_grad()
@pytest.mark.parametrize("arch", INTERLEAVED)
def test_interleaved_layout_per_layer_factors_match_each_layers_native_rotation(arch):
    """Layer l with factor s_l gets exactly the (cos, sin) that native linear scaling with s_l would give it."""
    base = build(arch)
    native = rope_adapter.find_rope_site(native_linear(base, 1.5)).rotary
    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=[1.0, 1.5]))
    site = rope_adapter.find_rope_site(model)
    with capture_position_embeddings(site.layers) as seen:
        model(IDS)
    positions = torch.arange(IDS.shape[1])[None]
    x = torch.zeros(1, IDS.shape[1], 1)
    want0, want1 = site.rotary(x, positions), native(x, positions)
    assert all(torch.equal(a, b) for a, b in zip(seen[0], want0, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(seen[1], want1, strict=True))


@torch.no_grad()
@pytest.mark.parametrize("arch", sorted(REFUSED))
def test_architectures_that_cannot_be_exact_are_refused_before_any_change(arch):
    base = build(arch)
    plain = base(IDS).logits
    modules = [(n, type(m)) for n, m in base.named_modules()]
    with pytest.raises(UnsupportedModelError, match=REFUSED[arch]):
        get_peft_model(base, LrsConfig(factors=1.2))
    assert [(n, type(m)) for n, m in base.named_modules()] == modules
    assert count_layer_hooks(base) == 0
    assert torch.equal(base(IDS).logits, plain)


def test_interleaved_export_gives_the_adapters_logits_in_a_fresh_process(tmp_path):
    from rope_adapter.export import export_model

    base = build("cohere")
    get_peft_model(copy.deepcopy(base), LrsConfig(factors=[1.0, 1.6])).save_pretrained(tmp_path / "ad")
    result = export_model(base, tmp_path / "ad", tmp_path / "out")  # verified: fresh process, no rope_adapter
    assert result.format == "custom-code"
    assert AutoConfig.from_pretrained(result.path).lrs_rotary_layout == "interleaved"
    assert result.max_abs_diff is not None and result.max_abs_diff <= 1e-4
