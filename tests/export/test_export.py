"""Export: base model + LRS adapter as one standalone folder, on tiny random models of every architecture.

Subprocesses are few on purpose (the suite shares two cores): one fresh process checks all nine custom-code
exports at once, and two exports run the built-in fresh-process verification (one passing, one corrupted).
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import os
import subprocess
import sys

import pytest
import torch
from peft import PeftModel, get_peft_model
from testkit.export_folders import (
    ATOL,
    IDS,
    NON_UNIFORM,
    adapter_logits,
    attn,
    logits_of,
    make_adapter,
    make_base,
    tree_digest,
)
from testkit.tiny_models import ARCHITECTURES, capture_position_embeddings
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

import rope_adapter.export as export
from rope_adapter import LrsConfig, UnsupportedModelError, count_layer_hooks
from rope_adapter.export import (
    CUSTOM_CODE,
    NATIVE,
    ExportError,
    export_model,
    plan_export,
    read_exported_factors,
)

# ------------------------------------------------------------------------------------------- planning


def test_plan_uniform_default_is_native_linear():
    plan = plan_export({"rope_type": "default", "rope_theta": 100.0}, None, [2.0] * 4)
    assert plan.format == NATIVE
    assert plan.rope_parameters == {"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0}


def test_plan_uniform_on_linear_multiplies_and_ones_leave_it_unchanged():
    linear = {"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0}
    assert plan_export(linear, None, [1.5] * 3).rope_parameters["factor"] == 3.0
    yarn = {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0}
    assert plan_export(yarn, None, [1.0] * 3).rope_parameters == yarn
    assert plan_export(yarn, None, [1.5] * 3).format == CUSTOM_CODE


def test_plan_per_layer_type():
    params = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0},
    }
    types = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    plan = plan_export(params, types, [1.5, 2.0, 1.5, 2.0])
    assert plan.format == NATIVE
    assert plan.rope_parameters["sliding_attention"] == {"rope_type": "linear", "rope_theta": 10.0, "factor": 1.5}
    assert plan.rope_parameters["full_attention"]["factor"] == 16.0
    assert plan_export(params, types, [1.5, 2.0, 1.6, 2.0]).format == CUSTOM_CODE
    assert plan_export(params, None, [2.0] * 4).format == CUSTOM_CODE


# ---------------------------------------------------------------------------------- custom code, all archs

_FRESH_PROCESS_CHECK = r"""
import json, sys, torch

class BlockRopeAdapter:
    def find_spec(self, name, path=None, target=None):
        if name == "rope_adapter" or name.startswith("rope_adapter."):
            raise ImportError("blocked: the export must load without rope_adapter")
        return None

sys.meta_path.insert(0, BlockRopeAdapter())
import transformers
from transformers import AutoModelForCausalLM

cases = json.load(open(sys.argv[1]))
ids = torch.load(sys.argv[2])
results = {}
for case in cases:
    folder, out = case["folder"], {}
    try:
        import rope_adapter  # noqa: F401
        out["rope_adapter_importable"] = True
    except ImportError:
        out["rope_adapter_importable"] = False
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, attn_implementation=case["attn"])
    out["class"] = type(model).__name__
    out["state_dict_has_factors"] = any("lrs" in key for key in model.state_dict())
    with torch.no_grad():
        logits = model.eval()(ids).logits
    out["max_diff"] = float((logits - torch.load(case["expected"])).abs().max())
    for name, load in [
        ("auto_without_trust", lambda: AutoModelForCausalLM.from_pretrained(folder)),
        ("base_class", lambda: getattr(transformers, case["base_class"]).from_pretrained(folder)),
    ]:
        try:
            load()
            out[name] = "LOADED"
        except Exception as exc:
            out[name] = type(exc).__name__
    results[case["arch"]] = out
json.dump(results, open(sys.argv[3], "w"))
"""


def test_every_architecture_exports_per_layer_factors(work):
    """Each architecture: custom code; a fresh process without rope_adapter gives the adapter's logits with
    trust_remote_code and refuses the folder without it (Auto class and base class alike)."""
    cases = []
    for arch in ARCHITECTURES:
        base = make_base(work / f"base_{arch}", arch)
        adapter = make_adapter(work / f"adapter_{arch}", NON_UNIFORM, arch)
        result = export_model(base, adapter, work / f"lrs_{arch}", verify=False)
        assert result.format == CUSTOM_CODE and result.model_type == f"{arch}_lrs"
        config = json.loads((result.path / "config.json").read_text())
        assert config["model_type"] == f"{arch}_lrs" and config["lrs_factors"] == NON_UNIFORM
        assert config["lrs_base_model_type"] == arch and config["lrs_provenance"] == {"test": arch}
        expected = work / f"expected_{arch}.pt"
        torch.save(adapter_logits(base, adapter, arch, IDS), expected)
        names = export.lrs_names(arch)
        cases.append(
            {
                "arch": arch,
                "folder": str(result.path),
                "expected": str(expected),
                "attn": attn(arch),
                "base_class": names.base_model_class,
            }
        )
    (work / "cases.json").write_text(json.dumps(cases))
    torch.save(IDS, work / "ids.pt")
    env = {
        **os.environ,
        "HF_MODULES_CACHE": str(work / "modules"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _FRESH_PROCESS_CHECK,
            str(work / "cases.json"),
            str(work / "ids.pt"),
            str(work / "results.json"),
        ],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((work / "results.json").read_text())
    for arch in ARCHITECTURES:
        got = results[arch]
        assert got["rope_adapter_importable"] is False
        assert got["class"] == export.lrs_names(arch).model_class, arch
        assert got["state_dict_has_factors"] is False, arch
        assert got["max_diff"] <= ATOL, (arch, got)
        assert got["auto_without_trust"] != "LOADED", (arch, got)
        assert got["base_class"] != "LOADED", (arch, got)


def test_generated_code_imports_only_torch_and_transformers(work, llama):
    result = export_model(*llama, work / "code_check", verify=False)
    code = sorted(result.path.glob("*.py"))
    assert [p.name for p in code] == ["configuration_llama_lrs.py", "modeling_llama_lrs.py"]
    for path in code:
        text = path.read_text()
        assert len(text.splitlines()) < 160, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in ("torch", "transformers") for a in node.names), path.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] in ("torch", "transformers"), path.name
        assert "rope_adapter" not in text.replace("rope-adapter", "")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_exported_model_gives_the_same_pairs_batched_or_layer_by_layer(work, llama, monkeypatch, dtype):
    """Every layer's (cos, sin) in one batch per forward (within the budget) or each layer's own: bit for bit."""
    from rope_adapter.standalone import modeling_mixin

    folder = work / "batched"
    if not folder.is_dir():
        export_model(*llama, folder, verify=False)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa", dtype=dtype)
    with capture_position_embeddings(model.model.layers) as batched:
        batched_logits = logits_of(model, IDS)
    monkeypatch.setitem(modeling_mixin.LRS_TABLE_BUDGET, "cpu", 0)
    with capture_position_embeddings(model.model.layers) as layer_by_layer:
        assert torch.equal(logits_of(model, IDS), batched_logits)
    assert len(batched) == 4
    for layer, pair in batched.items():
        assert all(torch.equal(a, b) for a, b in zip(pair, layer_by_layer[layer], strict=True))


def test_an_exported_model_hands_each_layer_its_pair_through_its_forward_and_copies_keep_theirs(work, llama):
    """Each decoder layer takes its pair in its own ``forward`` attribute (no forward pre-hook: torch's hook path
    costs a few per cent of a host-bound decode step); a deepcopy or a pickled copy calls its own layers."""
    import pickle

    from rope_adapter.standalone import modeling_mixin

    folder = work / "batched"
    if not folder.is_dir():
        export_model(*llama, folder, verify=False)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    want = logits_of(model, IDS)
    for layer in model.model.layers:
        assert isinstance(layer.__dict__.get("forward"), modeling_mixin.LayerForward) and not layer._forward_pre_hooks
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert all(layer.forward.layer is layer for layer in other.model.layers)
        assert torch.equal(logits_of(other, IDS), want)


def test_an_exported_layer_whose_forward_is_replaced_at_construction_takes_the_hook_path(work, llama, monkeypatch):
    """A decoder layer whose ``forward`` is already an instance attribute when the model is built keeps it; it gets
    its pair through a forward pre-hook, and the logits are those of the plain exported model."""
    from transformers.models.llama import modeling_llama

    from rope_adapter.standalone import modeling_mixin

    folder = work / "batched"
    if not folder.is_dir():
        export_model(*llama, folder, verify=False)
    want = logits_of(AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa"), IDS)
    plain_init = modeling_llama.LlamaDecoderLayer.__init__

    def init(self, *args, **kwargs):
        plain_init(self, *args, **kwargs)
        self.forward = functools.partial(type(self).forward, self)  # what a wrapping library leaves behind

    monkeypatch.setattr(modeling_llama.LlamaDecoderLayer, "__init__", init)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    for layer in model.model.layers:
        assert isinstance(layer.__dict__["forward"], functools.partial)
        assert any(isinstance(h, modeling_mixin.LayerRotary) for h in layer._forward_pre_hooks.values())
    assert torch.equal(logits_of(model, IDS), want)


def test_torch_compile_traces_an_exported_model_in_one_graph(work, llama):
    """No graph break in an exported model's per-layer path (``fullgraph=True`` raises at the first one); the
    compiled logits are the eager ones (Dynamo's ``eager`` backend: the tracing is what is checked)."""
    folder = work / "batched"
    if not folder.is_dir():
        export_model(*llama, folder, verify=False)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    assert torch.equal(logits_of(compiled, IDS), logits_of(model, IDS))
    torch._dynamo.reset()


def test_loads_without_remote_code_once_rope_adapter_export_is_imported(work, llama):
    base, adapter = llama
    result = export_model(base, adapter, work / "registered", verify=False)
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="sdpa")
    assert type(model).__name__ == "LlamaLrsForCausalLM"
    assert type(model).__module__.startswith("rope_adapter.standalone")
    assert not any("lrs" in key for key in model.state_dict())
    assert torch.allclose(logits_of(model, IDS), adapter_logits(base, adapter, "llama", IDS), rtol=0, atol=ATOL)
    # generation with a KV cache follows the adapter token for token
    reference = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, attn_implementation="sdpa"), adapter
    )
    prompt = dict(input_ids=IDS[:, :12], max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(model.generate(**prompt), reference.generate(**prompt))
    # an adapter stacked on the export would replace its factors: refused up front
    with pytest.raises(UnsupportedModelError, match="apply the adapter to the base"):
        get_peft_model(copy.deepcopy(model), LrsConfig(factors=1.0))
    # the factors stay float32 under a dtype cast, and a re-save keeps the guard and the factors
    assert copy.deepcopy(model).to(torch.bfloat16).lrs.factors.dtype == torch.float32
    model.save_pretrained(work / "resaved")
    saved = json.loads((work / "resaved" / "config.json").read_text())
    assert saved["rope_parameters"]["rope_type"] == "lrs" and saved["lrs_factors"] == NON_UNIFORM
    again = AutoModelForCausalLM.from_pretrained(work / "resaved", attn_implementation="sdpa")
    assert torch.equal(logits_of(again, IDS), logits_of(model, IDS))


# ------------------------------------------------------------------------------------------------- native


def test_uniform_factor_is_native_linear(work, llama):
    base, _ = llama
    adapter = make_adapter(work / "adapter_uniform", 2.0)
    result = export_model(base, adapter, work / "uniform", verify=False)
    assert result.format == NATIVE and result.model_type == "llama"
    config = json.loads((result.path / "config.json").read_text())
    assert config["rope_parameters"] == {"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0}
    assert not {"auto_map", "lrs_factors"} & set(config) and not list(result.path.glob("*.py"))
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="sdpa")
    assert type(model).__module__.startswith("transformers.")
    assert torch.allclose(logits_of(model, IDS), adapter_logits(base, adapter, "llama", IDS), rtol=0, atol=ATOL)
    assert read_exported_factors(result.path)["factors"] == [2.0] * 4


def test_uniform_factor_on_linear_base_multiplies(work):
    base = make_base(work / "base_linear", rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0})
    assert json.loads((base / "config.json").read_text())["rope_parameters"]["factor"] == 2.0
    adapter = make_adapter(
        work / "adapter_linear", 1.5, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}
    )
    result = export_model(base, adapter, work / "linear", verify=False)
    assert json.loads((result.path / "config.json").read_text())["rope_parameters"]["factor"] == 3.0
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="sdpa")
    assert torch.allclose(logits_of(model, IDS), adapter_logits(base, adapter, "llama", IDS), rtol=0, atol=ATOL)


def test_gemma3_constant_per_layer_type_is_native(work):
    base = make_base(work / "base_gemma3_native", "gemma3_text")
    adapter = make_adapter(work / "adapter_gemma3_native", [1.5, 2.0, 1.5, 2.0], "gemma3_text")
    result = export_model(base, adapter, work / "gemma3_native", verify=False)
    assert result.format == NATIVE and result.model_type == "gemma3_text"
    rope = json.loads((result.path / "config.json").read_text())["rope_parameters"]
    assert rope["sliding_attention"] == {"rope_type": "linear", "rope_theta": 100.0, "factor": 1.5}
    assert rope["full_attention"] == {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="eager")
    assert torch.allclose(logits_of(model, IDS), adapter_logits(base, adapter, "gemma3_text", IDS), rtol=0, atol=ATOL)


def test_phi3_uniform_falls_back_to_custom_code(work):
    """Phi3 accepts only longrope in rope_parameters, so even one factor for all layers needs the code."""
    base = make_base(work / "base_phi3_uniform", "phi3")
    adapter = make_adapter(work / "adapter_phi3_uniform", 1.5, "phi3")
    result = export_model(base, adapter, work / "phi3_uniform", verify=False)
    assert result.format == CUSTOM_CODE and "phi3" in result.reason
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="sdpa")
    assert torch.allclose(logits_of(model, IDS), adapter_logits(base, adapter, "phi3", IDS), rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------------- folder contents


def test_tokenizer_generation_config_and_chat_template_are_copied(work, llama):
    base, adapter = llama
    before = tree_digest(base)
    result = export_model(base, adapter, work / "copied", verify=False)
    assert tree_digest(base) == before  # the base model's files are never modified
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        assert (result.path / name).read_bytes() == (base / name).read_bytes(), name
    assert GenerationConfig.from_pretrained(result.path).max_new_tokens == 7
    tokenizer = AutoTokenizer.from_pretrained(result.path)
    assert tokenizer("héllo").input_ids == AutoTokenizer.from_pretrained(base)("héllo").input_ids
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<s>hi</s>"
    assert not [p for p in work.iterdir() if ".tmp-" in p.name]
    sidecar = json.loads((result.path / export.SIDECAR_NAME).read_text())
    assert sidecar["format"] == CUSTOM_CODE and sidecar["adapter"] == str(adapter) and sidecar["verification"] is None


def test_sharded_weights(work, llama):
    result = export_model(*llama, work / "sharded", verify=False, max_shard_size="40KB")
    shards = sorted(p.name for p in result.path.glob("model-*.safetensors"))
    assert len(shards) > 1 and (result.path / "model.safetensors.index.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="sdpa")
    assert torch.allclose(logits_of(model, IDS), adapter_logits(*llama, "llama", IDS), rtol=0, atol=ATOL)


def test_read_exported_factors_and_info(work, llama):
    from rope_adapter.cli.info import describe

    result = export_model(*llama, work / "info", verify=False)
    info = read_exported_factors(result.path)
    assert info["kind"] == "exported-model" and info["format"] == CUSTOM_CODE
    assert info["factors"] == NON_UNIFORM and info["num_layers"] == 4 and info["head_dim"] == 16
    assert info["base_model_type"] == "llama" and info["provenance"] == {"test": "llama"}
    assert info["base_rope_parameters"] == {"rope_type": "default", "rope_theta": 100.0}
    assert describe(str(result.path))["factors"] == NON_UNIFORM
    with pytest.raises(ExportError, match="not a folder written by"):
        read_exported_factors(llama[0])


# ------------------------------------------------------------------------------------ in-memory models


def test_export_from_peft_model_and_from_base_model(work, llama):
    base, adapter = llama
    expected = adapter_logits(base, adapter, "llama", IDS)
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, attn_implementation="sdpa"), adapter
    )
    result = export_model(peft_model, out=work / "from_peft", verify=False)
    assert result.factors == NON_UNIFORM
    assert count_layer_hooks(peft_model) == 4  # left as it was
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="sdpa")
    assert torch.allclose(logits_of(model, IDS), expected, rtol=0, atol=ATOL)

    plain = AutoModelForCausalLM.from_pretrained(base, attn_implementation="sdpa")
    before = logits_of(plain, IDS)
    result = export_model(plain, adapter, work / "from_base", verify=False)
    assert count_layer_hooks(plain) == 0 and not hasattr(plain, "peft_config")
    assert torch.equal(logits_of(plain, IDS), before)  # given back unchanged
    model = AutoModelForCausalLM.from_pretrained(result.path, attn_implementation="sdpa")
    assert torch.allclose(logits_of(model, IDS), expected, rtol=0, atol=ATOL)
