"""The vLLM plugin on tiny random models of every architecture it serves: exported per-layer factors give the
PEFT adapter's log-probs and greedy tokens, factors all 1 give vLLM's own base model, a folder it cannot serve is
refused in one line, and a uniform export below 1 is served as long as the export says.

Tolerance: float32 on both sides; measured differences are below 1e-6 (vLLM's CPU attention and fused kernels sum
in another order than torch). TOL = 1e-5 is ten times that, and every case checks that the factors move the
log-probs by far more than TOL, so a model served without them fails.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from peft import get_peft_model
from testkit.tiny_models import byte_tokenizer, tiny_model
from testkit.vllm_checks import NEW_TOKENS, engine, hf_run, max_diff, same_greedy, vllm_run

from rope_adapter import LrsConfig
from rope_adapter.export import SIDECAR_NAME, export_model
from rope_adapter.vllm import SERVED, VllmServingError

TOL = 1e-5
FACTORS = [1.0, 1.5, 0.7, 3.0]
PROMPT = [1, *range(3, 200)]


def shape(arch: str) -> dict:
    """head_dim 32: vLLM's CPU attention has no kernel below it (the test kit's default is 16)."""
    kw = {"hidden_size": 128} if arch in ("gpt_neox", "phi3") else {"hidden_size": 128, "head_dim": 32}
    if arch == "gemma2":
        kw["tie_word_embeddings"] = True  # vLLM's Gemma2 has no lm_head of its own
    return kw


def adapted(arch: str, factors) -> torch.nn.Module:
    return get_peft_model(tiny_model(arch, **shape(arch)), LrsConfig(factors=factors))


def export(peft_model, out: Path) -> Path:
    export_model(peft_model, out=out, tokenizer=byte_tokenizer(), verify=False)
    return out


@pytest.fixture(scope="module")
def llama_export(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    peft_model = adapted("llama", FACTORS)
    return peft_model, export(peft_model, tmp_path_factory.mktemp("vllm") / "llama-lrs")


def test_plain_model_equals_transformers(tmp_path):
    model = tiny_model("llama", **shape("llama"))
    model.save_pretrained(tmp_path)
    byte_tokenizer().save_pretrained(tmp_path)
    with engine(tmp_path) as llm:
        served = vllm_run(llm, PROMPT)
    expected = hf_run(model, PROMPT)
    assert max_diff(served, expected) < TOL
    assert same_greedy(served, expected)


@pytest.mark.parametrize("arch", sorted(SERVED))
def test_per_layer_export_equals_the_adapter(arch, tmp_path):
    peft_model = adapted(arch, FACTORS)
    folder = export(peft_model, tmp_path / f"{arch}-lrs")
    assert json.loads((folder / "config.json").read_text())["model_type"] == f"{arch}_lrs"
    with engine(folder) as llm:
        served = vllm_run(llm, PROMPT)
    expected = hf_run(peft_model, PROMPT)
    with peft_model.disable_adapter():
        base = hf_run(peft_model, PROMPT)
    assert max_diff(expected, base) > 100 * TOL  # the factors matter here
    assert max_diff(served, expected) < TOL
    assert same_greedy(served, expected)


def test_factors_all_one_equal_the_base(llama_export, tmp_path):
    """The plugin's path with factors 1 (a per-layer folder whose factors are then set to 1) is vLLM's own model."""
    _, folder = llama_export
    ones = tmp_path / "ones"
    shutil.copytree(folder, ones)
    config = json.loads((ones / "config.json").read_text())
    config["lrs_factors"] = [1.0] * len(FACTORS)
    (ones / "config.json").write_text(json.dumps(config))
    plain = tmp_path / "plain"
    tiny_model("llama", **shape("llama")).save_pretrained(plain)
    byte_tokenizer().save_pretrained(plain)
    with engine(ones) as llm:
        served = vllm_run(llm, PROMPT)
    with engine(plain) as llm:
        base = vllm_run(llm, PROMPT)
    with engine(folder) as llm:
        scaled = vllm_run(llm, PROMPT)
    assert max_diff(served, base) == 0.0 and served.tokens == base.tokens
    assert max_diff(scaled, base) > 100 * TOL


def one_line_refusal(folder: Path) -> str:
    with pytest.raises(VllmServingError) as caught:
        with engine(folder):
            pass
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_architecture_vllm_has_no_class_for_is_refused_in_one_line(tmp_path):
    folder = export(adapted("gpt_neox", FACTORS), tmp_path / "neox-lrs")
    message = one_line_refusal(folder)
    assert "'gpt_neox_lrs'" in message and "GPTNeoXForCausalLM" in message and "transformers" in message


def test_a_folder_with_the_wrong_number_of_factors_is_refused_in_one_line(llama_export, tmp_path):
    _, folder = llama_export
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    config = json.loads((edited / "config.json").read_text())
    config["lrs_factors"] = FACTORS[:3]
    (edited / "config.json").write_text(json.dumps(config))
    message = one_line_refusal(edited)
    assert "3 lrs_factors for 4 decoder layers" in message


def test_uniform_export_below_one_is_served_as_long_as_the_export_says(tmp_path):
    """vLLM reads a linear factor below 1 as a shorter context; the export states the length vLLM serves, and the
    model up to that length is the adapter."""
    peft_model = adapted("llama", 0.5)
    folder = export(peft_model, tmp_path / "half")
    note = json.loads((folder / SIDECAR_NAME).read_text())["vllm"]
    assert note["full_max_model_len"] == 512 and note["vllm_max_model_len"] == 256
    with pytest.raises(ValueError, match="max_model_len"):  # vLLM's own guard: no longer length by accident
        with engine(folder, max_model_len=note["full_max_model_len"]):
            pass
    prompt = [1, *(3 + i % 250 for i in range(note["vllm_max_model_len"] - NEW_TOKENS - 1))]
    with engine(folder, max_model_len=None) as llm:
        assert llm.llm_engine.model_config.max_model_len == note["vllm_max_model_len"]
        served = vllm_run(llm, prompt)
    expected = hf_run(peft_model, prompt)
    assert max_diff(served, expected) < TOL
    assert same_greedy(served, expected)
