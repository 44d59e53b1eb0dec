"""Export refusals and verification: bad inputs refused before any weight loads, an output folder never half-written
or wrongly replaced, the fresh-process check (CLI and a corrupted folder), and the embedded SmolLM2 end to end."""

from __future__ import annotations

import copy
import json

import pytest
from peft import get_peft_model
from testkit.export_folders import make_adapter, tree_digest

import rope_adapter
import rope_adapter.export as export
from rope_adapter import AdapterMismatchError, LrsConfig
from rope_adapter.export import CUSTOM_CODE, ExportError, ExportVerificationError, export_model, read_exported_factors

# ---------------------------------------------------------------------------------------------- bad input


@pytest.fixture
def no_weight_loading(monkeypatch):
    """Fail the test if the export loads the base model's weights."""

    def boom(*args, **kwargs):
        raise AssertionError("weights were loaded before the inputs were checked")

    monkeypatch.setattr(export.sources.AutoModelForCausalLM, "from_pretrained", boom)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"num_layers": 6}, "6 decoder layers"),
        ({"head_dim": 32}, "head size 32"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}}, "RoPE settings"),
    ],
)
def test_adapter_for_another_base_is_refused_before_loading_weights(work, llama, no_weight_loading, overrides, match):
    factors = [1.5] * overrides.get("num_layers", 4)
    adapter = make_adapter(work / f"adapter_other_{match.split()[-1]}", factors, **overrides)
    with pytest.raises(AdapterMismatchError, match=match):
        export_model(llama[0], adapter, work / "never")
    assert not (work / "never").exists()


def test_out_checks(work, llama, no_weight_loading):
    base, adapter = llama
    full = work / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty.*--overwrite"):
        export_model(base, adapter, full)
    assert (full / "keep.txt").read_text() == "mine"
    with pytest.raises(ExportError, match="inside the base model folder"):
        export_model(base, adapter, base / "export")
    with pytest.raises(ExportError, match="would delete"):
        export_model(base, adapter, work, overwrite=True)
    with pytest.raises(ExportError, match="give the LRS adapter"):
        export_model(base, None, work / "x")


def test_overwrite_replaces_and_an_export_is_not_a_base(work, llama):
    base, adapter = llama
    out = work / "replaced"
    out.mkdir()
    (out / "old.txt").write_text("old")
    result = export_model(base, adapter, out, overwrite=True, verify=False)
    assert not (out / "old.txt").exists() and (out / "config.json").is_file()
    assert not [p for p in work.iterdir() if ".old-" in p.name or ".tmp-" in p.name]
    with pytest.raises(ExportError, match="already an exported LRS model"):
        export_model(result.path, adapter, work / "twice")


# ------------------------------------------------------------------------------- fresh-process verification


def test_cli_export_verifies_in_a_fresh_process(work, llama, capsys):
    from rope_adapter.cli import main

    base, adapter = llama
    args = ["export", "--model", str(base), "--adapter", str(adapter), "--out", str(work / "cli")]
    assert main([*args, "--dtype", "bfloat16"]) == 0
    printed = capsys.readouterr().out
    assert "custom-code (model_type llama_lrs)" in printed and "trust_remote_code=True" in printed
    verification = read_exported_factors(work / "cli")["verification"]
    assert verification == {"max_abs_diff": 0.0, "probe_tokens": 64, "dtype": "torch.bfloat16"}
    assert json.loads((work / "cli" / "config.json").read_text())["dtype"] == "bfloat16"
    assert main(args) == 2
    assert "not empty" in capsys.readouterr().err


def test_verification_detects_a_mismatch(work, llama, monkeypatch):
    """A folder that loads but computes something else is never published."""
    real = export.bake._factors
    monkeypatch.setattr(export.bake, "_factors", lambda source: [f * 1.25 for f in real(source)])
    with pytest.raises(ExportVerificationError, match="does not give the adapter's logits"):
        export_model(*llama, work / "corrupt")
    assert not (work / "corrupt").exists()
    assert not [p for p in work.iterdir() if ".tmp-" in p.name]


# ------------------------------------------------------------------------------------------- integration


@pytest.mark.integration
def test_smollm2_exports_and_reloads_in_a_fresh_process(smollm2, tmp_path):
    from rope_adapter.embedded.convert import default_model_dir

    base, _ = smollm2
    factors = [round(1.0 + 0.5 * i / 29, 6) for i in range(30)]
    get_peft_model(copy.deepcopy(base), LrsConfig(factors=factors)).save_pretrained(tmp_path / "adapter")
    before = tree_digest(default_model_dir())
    result = export_model("smollm2-135m-instruct", tmp_path / "adapter", tmp_path / "out")
    assert result.format == CUSTOM_CODE and result.model_type == "llama_lrs"
    assert result.max_abs_diff is not None and result.max_abs_diff <= 1e-4  # fresh process, rope_adapter blocked
    assert tree_digest(default_model_dir()) == before
    assert (result.path / "chat_template.jinja").is_file()
    assert read_exported_factors(result.path)["factors"] == factors
    assert rope_adapter.__version__ in (result.path / "modeling_llama_lrs.py").read_text()
