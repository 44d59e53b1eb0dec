"""The adapter behaves like any PEFT adapter: save/load, several adapters, unload, merge, dtypes, training."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import load_file
from testkit.tiny_models import byte_tokenizer, tiny_model

import rope_adapter
from rope_adapter import LrsConfig, MergeError, count_layer_hooks

IDS = torch.randint(3, 250, (2, 80), generator=torch.Generator().manual_seed(0))
FACTORS = [1.0, 1.3, 1.7, 2.2]


@pytest.fixture
def base_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "base"
    tiny_model("llama").save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def load_base(folder: Path, **kwargs):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()


def test_zero_trainable_parameters_and_file_layout(base_dir, tmp_path):
    model = get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS))
    trainable, total = model.get_nb_trainable_parameters()
    assert trainable == 0 and total > 0
    model.save_pretrained(tmp_path / "ad")
    tensors = load_file(tmp_path / "ad" / "adapter_model.safetensors")
    assert list(tensors) == ["base_model.model.model.rotary_emb.lrs_factors"]
    (t,) = tensors.values()
    assert t.dtype == torch.float32 and t.shape == (4,)
    assert torch.equal(t, torch.tensor(FACTORS))
    cfg = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LRS" and cfg["factors"] == FACTORS and cfg["num_layers"] == 4
    assert cfg["head_dim"] == 16 and cfg["base_model_type"] == "llama"
    assert cfg["base_rope_parameters"]["rope_theta"] == 100.0
    assert cfg["base_model_name_or_path"] == str(base_dir)


def test_save_and_load_round_trip_in_a_fresh_process(base_dir, tmp_path):
    model = get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS, provenance={"method": "hand"}))
    expected = model(IDS).logits
    model.save_pretrained(tmp_path / "ad")
    torch.save(IDS, tmp_path / "ids.pt")
    code = textwrap.dedent(
        f"""
        import torch, rope_adapter
        from peft import PeftModel, AutoPeftModelForCausalLM
        from transformers import AutoModelForCausalLM
        ids = torch.load({str(tmp_path / "ids.pt")!r})
        base = AutoModelForCausalLM.from_pretrained({str(base_dir)!r}).eval()
        m = PeftModel.from_pretrained(base, {str(tmp_path / "ad")!r})
        torch.save(m(ids).logits, {str(tmp_path / "a.pt")!r})
        auto = AutoPeftModelForCausalLM.from_pretrained({str(tmp_path / "ad")!r}).eval()
        torch.save(auto(ids).logits, {str(tmp_path / "b.pt")!r})
        print(rope_adapter.get_factors(m), m.peft_config["default"].provenance)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "'method': 'hand'" in out.stdout
    assert torch.equal(torch.load(tmp_path / "a.pt"), expected)
    assert torch.equal(torch.load(tmp_path / "b.pt"), expected)


def test_from_pretrained_without_import_fails_with_peft_keyerror(base_dir, tmp_path):
    """What a user sees without ``import rope_adapter``: PEFT's ``KeyError: 'LRS'`` (the CLI turns it into a hint:
    tests/cli/test_reliability_cli.py)."""
    get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS)).save_pretrained(tmp_path / "ad")
    code = textwrap.dedent(
        f"""
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({str(base_dir)!r}), {str(tmp_path / "ad")!r})
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "KeyError" in out.stderr and "LRS" in out.stderr


def test_two_adapters_set_delete_unload_leave_no_hooks(base_dir):
    base = load_base(base_dir)
    plain = base(IDS).logits
    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=FACTORS), adapter_name="a")
    model.add_adapter("b", LrsConfig(factors=2.0))
    out_a = model(IDS).logits
    model.set_adapter("b")
    out_b = model(IDS).logits
    assert not torch.equal(out_a, out_b)
    assert rope_adapter.get_factors(model) == [2.0] * 4
    model.set_adapter("a")
    assert torch.equal(model(IDS).logits, out_a)
    model.delete_adapter("a")
    assert model.active_adapters == ["b"]
    assert torch.equal(model(IDS).logits, out_b)
    assert count_layer_hooks(model) == 4
    model.delete_adapter("b")
    assert count_layer_hooks(model) == 0
    assert torch.equal(model.base_model.model(IDS).logits, plain)  # PeftModel itself needs an adapter

    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=FACTORS))
    unloaded = model.unload()
    assert count_layer_hooks(unloaded) == 0
    assert not any(isinstance(m, rope_adapter.LrsRotaryLayer) for m in unloaded.modules())
    assert torch.equal(unloaded(IDS).logits, plain)


def test_deepcopy_keeps_an_independent_working_adapter(base_dir):
    model = get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS))
    expected = model(IDS).logits
    clone = copy.deepcopy(model)
    assert torch.equal(clone(IDS).logits, expected)
    rope_adapter.set_factors(clone, 1.0)
    assert torch.equal(model(IDS).logits, expected)
    assert count_layer_hooks(clone) == 4
    with clone.disable_adapter():
        plain = clone(IDS).logits
    assert torch.allclose(clone(IDS).logits, plain, atol=1e-5)  # the clone's own factors (all 1.0) took effect
    assert not torch.allclose(expected, plain, atol=1e-3)  # ... and they differ from the original's


def test_a_deepcopy_or_pickle_of_the_model_gives_each_layer_its_own_copy(base_dir):
    """Each decoder layer's LRS ``forward`` refers to its own layer: a copy's layers run themselves, not the
    original's (whose weights are then changed to tell them apart)."""
    model = get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS))
    expected = model(IDS).logits
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert count_layer_hooks(clone) == 4 and torch.equal(clone(IDS).logits, expected)
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    assert torch.equal(clone(IDS).logits, expected)


def accelerate_like_wrapper(layer: torch.nn.Module, calls: list[int]) -> None:
    """Replace ``layer.forward`` as accelerate's device hooks do (an instance attribute calling the old one)."""
    old = layer.forward

    def forward(*args, **kwargs):
        calls.append(1)
        return old(*args, **kwargs)

    layer.forward = forward


def test_a_layer_whose_forward_was_replaced_before_still_gets_its_factor(base_dir):
    """A layer whose ``forward`` another library replaced keeps that ``forward`` and takes its factor through a
    forward pre-hook; unloading gives it back as it was."""
    reference = get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS))(IDS).logits
    base = load_base(base_dir)
    plain = base(IDS).logits
    calls: list[int] = []
    accelerate_like_wrapper(base.model.layers[2], calls)
    wrapped = base.model.layers[2].forward
    model = get_peft_model(base, LrsConfig(factors=FACTORS))
    assert count_layer_hooks(model) == 4
    assert torch.equal(model(IDS).logits, reference) and calls
    unloaded = model.unload()
    assert count_layer_hooks(unloaded) == 0 and unloaded.model.layers[2].forward is wrapped
    assert all("forward" not in layer.__dict__ for i, layer in enumerate(unloaded.model.layers) if i != 2)
    assert torch.equal(unloaded(IDS).logits, plain)


def test_a_wrapper_added_after_the_adapter_passes_through_once_it_is_unloaded(base_dir):
    base = load_base(base_dir)
    plain = base(IDS).logits
    model = get_peft_model(base, LrsConfig(factors=FACTORS))
    adapted = model(IDS).logits
    calls: list[int] = []
    accelerate_like_wrapper(base.model.layers[0], calls)
    assert torch.equal(model(IDS).logits, adapted) and calls
    unloaded = model.unload()
    assert torch.equal(unloaded(IDS).logits, plain)  # the LRS forward left inside the wrapper passes through


def test_merge_and_unload_folds_uniform_factors_into_linear_rope(base_dir):
    base = load_base(base_dir)
    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=1.5))
    expected = model(IDS).logits
    merged = model.merge_and_unload()
    assert merged.config.rope_parameters["rope_type"] == "linear"
    assert merged.config.rope_parameters["factor"] == 1.5
    assert count_layer_hooks(merged) == 0
    assert torch.equal(merged(IDS).logits, expected)

    model = get_peft_model(copy.deepcopy(base), LrsConfig(factors=FACTORS))
    with pytest.raises(MergeError, match="export"):
        model.merge_and_unload()
    assert torch.equal(model(IDS).logits, get_peft_model(copy.deepcopy(base), LrsConfig(factors=FACTORS))(IDS).logits)


def test_factors_stay_float32_under_bf16(base_dir, tmp_path):
    model = get_peft_model(load_base(base_dir), LrsConfig(factors=[1.3] * 4))
    model = model.to(torch.bfloat16)
    assert rope_adapter.get_factors(model)[0] == pytest.approx(1.3, abs=1e-7)
    assert model(IDS).logits.dtype == torch.bfloat16
    model.save_pretrained(tmp_path / "ad")
    t = load_file(tmp_path / "ad" / "adapter_model.safetensors")
    assert next(iter(t.values())).dtype == torch.float32
    loaded = PeftModel.from_pretrained(load_base(base_dir, dtype=torch.bfloat16), tmp_path / "ad")
    assert rope_adapter.get_factors(loaded) == rope_adapter.get_factors(model)


def test_gradients_and_gradient_checkpointing_still_work(base_dir):
    base = load_base(base_dir)
    base.gradient_checkpointing_enable()
    model = get_peft_model(base, LrsConfig(factors=FACTORS))
    model.train()
    model.base_model.model.lm_head.weight.requires_grad_(True)
    out = model(IDS, labels=IDS)
    out.loss.backward()
    grad = model.base_model.model.lm_head.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    model.eval()
    reference = get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS))
    torch.testing.assert_close(model(IDS).logits, reference(IDS).logits)


def test_generate_with_cache_equals_full_recompute_and_left_padding(base_dir):
    tok = byte_tokenizer()
    model = get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS))
    prompts = ["The key is 4711 and", "x"]
    batch = tok(prompts, return_tensors="pt", padding=True)
    gen = model.generate(**batch, max_new_tokens=12, do_sample=False, pad_token_id=0)

    def until_eos(tokens: list[int]) -> list[int]:  # a finished row of a batch goes on with padding
        return tokens[: tokens.index(tok.eos_token_id) + 1] if tok.eos_token_id in tokens else tokens

    for i, prompt in enumerate(prompts):
        alone = tok([prompt], return_tensors="pt")
        single = model.generate(**alone, max_new_tokens=12, do_sample=False, pad_token_id=0)
        single_new = until_eos(single[0, alone.input_ids.shape[1] :].tolist())
        assert single_new == until_eos(gen[i, batch.input_ids.shape[1] :].tolist())
        # full recompute, no cache: greedy argmax over the whole sequence at every step
        ids = alone.input_ids
        for _ in range(12):
            nxt = model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
        assert until_eos(ids[0, alone.input_ids.shape[1] :].tolist()) == single_new


def test_a_load_that_overlaps_a_save_is_refused_not_mixed(base_dir, tmp_path, monkeypatch):
    """Another process saves the adapter again between PEFT's read of adapter_config.json and its read of the
    weights: the load is refused with that reason (not blamed on a hand edit), and the base model is untouched."""
    import peft.peft_model

    get_peft_model(load_base(base_dir), LrsConfig(factors=FACTORS)).save_pretrained(tmp_path / "ad")
    writer = get_peft_model(load_base(base_dir), LrsConfig(factors=[2.0, 2.0, 1.5, 1.0]))
    original = peft.peft_model.load_peft_weights

    def save_in_between(*args, **kwargs):
        writer.save_pretrained(tmp_path / "ad")  # the other process's save, complete (weights, then config)
        return original(*args, **kwargs)

    monkeypatch.setattr(peft.peft_model, "load_peft_weights", save_in_between)
    base = load_base(base_dir)
    with torch.inference_mode():
        before = base(IDS).logits
    with pytest.raises(rope_adapter.AdapterFileError, match="saved again while it was being loaded"):
        PeftModel.from_pretrained(base, tmp_path / "ad")
    assert count_layer_hooks(base) == 0
    with torch.inference_mode():
        assert torch.equal(base(IDS).logits, before)
    monkeypatch.setattr(peft.peft_model, "load_peft_weights", original)
    loaded = PeftModel.from_pretrained(load_base(base_dir), tmp_path / "ad")  # loading again sees one pair
    assert rope_adapter.get_factors(loaded) == [2.0, 2.0, 1.5, 1.0]
