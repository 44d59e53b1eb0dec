"""What vLLM makes of a native export's length (export/serving.py): the pure rule, and an export with a uniform
factor below 1 that says so. The vLLM tests (tests/vllm/) check the rule against vLLM itself."""

from __future__ import annotations

import json

from peft import get_peft_model
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter import LrsConfig
from rope_adapter.export import SIDECAR_NAME, export_model
from rope_adapter.export.serving import vllm_lengths


def test_linear_factor_scales_the_length_and_the_tokenizer_caps_it_first():
    config = {
        "model_type": "llama",
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "linear", "factor": 0.5},
    }
    assert vllm_lengths(config, None) == (8192, 4096)
    assert vllm_lengths(config, {"model_max_length": 2048}) == (2048, 1024)
    assert vllm_lengths({**config, "rope_parameters": {"rope_type": "default"}}, None) == (8192, 8192)
    yarn = {**config, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}}
    assert vllm_lengths(yarn, None) == (8192, 8192)  # vLLM takes YaRN's length as already scaled
    per_type = {
        "model_type": "gemma3_text",
        "max_position_embeddings": 512,
        "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 0.5}},
    }
    assert vllm_lengths(per_type, None) == (512, 512)  # vLLM never scales Gemma3's length
    assert vllm_lengths({"model_type": "llama"}, None) is None


def test_uniform_export_below_one_says_what_vllm_does(tmp_path):
    peft_model = get_peft_model(tiny_model("llama"), LrsConfig(factors=0.5))
    export_model(peft_model, out=tmp_path / "half", tokenizer=byte_tokenizer(), verify=False)
    config = json.loads((tmp_path / "half" / "config.json").read_text())
    note = json.loads((tmp_path / "half" / SIDECAR_NAME).read_text())["vllm"]
    assert config["rope_parameters"]["factor"] == 0.5 and "model_max_length" not in config
    assert note["full_max_model_len"] == 512 and note["vllm_max_model_len"] == 256
    assert "at most 256 tokens, not 512" in note["note"]

    peft_model = get_peft_model(tiny_model("llama"), LrsConfig(factors=2.0))
    export_model(peft_model, out=tmp_path / "double", tokenizer=byte_tokenizer(), verify=False)
    assert "vllm" not in json.loads((tmp_path / "double" / SIDECAR_NAME).read_text())
