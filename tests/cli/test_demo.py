"""`rope-adapter demo` end to end on a tiny random model: every step runs, the report holds the numbers and the
commands, the exported folder loads without PEFT, each printed command reruns its step alone, and a full search's
adapter is evaluated beside the demo's own, each named as what it is."""

from __future__ import annotations

import json
import shlex

import pytest
import torch
from peft import PeftModel, get_peft_model
from testkit.tiny_models import byte_tokenizer, tiny_model
from transformers import AutoModelForCausalLM

import rope_adapter
from rope_adapter import LrsConfig
from rope_adapter.cli import main
from rope_adapter.cli.demo import REFERENCE_LABEL, SMOLLM2_REFERENCE
from rope_adapter.export.reading import read_exported_factors


def test_demo_end_to_end_on_a_tiny_model(tmp_path, capsys):
    model_dir = tmp_path / "tiny-llama"
    tiny_model("llama", num_layers=3).save_pretrained(model_dir)
    byte_tokenizer().save_pretrained(model_dir)
    out = tmp_path / "demo-report"
    # stands in for a full search's adapter: one that fits this model and differs from anything the demo finds
    reference = tmp_path / "full-search-adapter"
    get_peft_model(tiny_model("llama", num_layers=3), LrsConfig(factors=[0.7, 1.3, 0.9])).save_pretrained(reference)

    rc = main(
        ["demo", "--model", str(model_dir), "--out", str(out), "--pairs", "3"]  # positions: the task's default
        + ["--trials", "3", "--search-records", "1", "--eval-records", "2", "--reference-adapter", str(reference)]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert f"Report: {(out / 'report.md').resolve()}" in printed

    report = (out / "report.md").read_text()
    for section in ("## 1. The base model", "## 2. The search", "## 3. Held-out", "## 4. Exported", "## Reproduce"):
        assert section in report
    assert "is missing" not in report  # every step's results.md / search_report.md made it in
    for image in ("1-base-eval/positions.png", "2-search/factors.png", "3-heldout-eval/positions.png"):
        assert f"]({image})" in report and (out / image).stat().st_size > 0

    heldout = json.loads((out / "3-heldout-eval" / "results.json").read_text())
    names = [v["name"] for v in heldout["variants"]]
    assert names[0] == "base" and names[1].startswith("uniform:") and names[2:] == ["demo-search", REFERENCE_LABEL]
    specs = {v["name"]: v["spec"] for v in heldout["variants"]}
    assert str(out / "2-search" / "adapter") in specs["demo-search"] and str(reference) in specs[REFERENCE_LABEL]
    # the report says which adapter is which
    assert "- `demo-search`: the adapter this demo's small search found" in report
    assert f"- `{REFERENCE_LABEL}`: the adapter given with `--reference-adapter` (`{reference}`)" in report
    assert heldout["settings"]["seed"] == 2  # fresh records, not the base eval's (seed 1)
    for entry in heldout["summary"].values():  # every position of a 3-pair record, as search and eval default
        assert set(entry["logprob"]["by_position"]) == {"0", "1", "2"}
    assert "gold at positions 0, 1, 2." in report and "--positions" not in report

    # the adapter and the exported model agree, and the export loads without PEFT
    _, factors = rope_adapter.read_adapter_factors(out / "2-search" / "adapter")
    assert read_exported_factors(out / "4-exported")["factors"] == pytest.approx(factors.tolist())
    exported = AutoModelForCausalLM.from_pretrained(out / "4-exported")
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), out / "2-search" / "adapter")
    ids = torch.arange(3, 60).unsqueeze(0)
    with torch.no_grad():
        torch.testing.assert_close(exported(ids).logits, adapted(ids).logits)
    assert (out / "4-exported" / "README.md").read_text() == (out / "model-card.md").read_text()
    card = (out / "model-card.md").read_text()  # the results travel with the export, without local paths
    assert "model-index" in card and "## Held-out results of the search" in card and "## Evaluation" in card
    assert str(tmp_path) not in card
    assert "Paired differences over all gold positions" in report and "− `base` = " in report

    # each step's printed command reruns that step alone: rerun step 1 into a new folder
    steps = report.split("Each step alone")[1]
    commands = [line for line in steps.splitlines() if line.startswith("rope-adapter ")]
    assert len(commands) == 4 and commands[0].startswith("rope-adapter eval ")
    argv = shlex.split(commands[0])[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "again")
    assert main(argv) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    first = json.loads((out / "1-base-eval" / "results.json").read_text())
    assert again["summary"] == first["summary"]


def test_a_reference_adapter_for_another_model_is_refused_before_any_step(tmp_path, capsys):
    model_dir = tmp_path / "tiny-llama"
    tiny_model("llama", num_layers=3).save_pretrained(model_dir)
    byte_tokenizer().save_pretrained(model_dir)
    out = tmp_path / "demo-report"
    # the shipped SmolLM2 adapter has 30 layers: it cannot be evaluated on a 3-layer model
    rc = main(
        ["demo", "--model", str(model_dir), "--out", str(out), "--pairs", "3", "--positions", "0", "2"]
        + ["--trials", "3", "--search-records", "1", "--reference-adapter", str(SMOLLM2_REFERENCE)]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert f"--reference-adapter {SMOLLM2_REFERENCE}: not an adapter for {model_dir}" in err
    assert not out.exists()


def test_the_shipped_reference_is_the_committed_full_search_adapter():
    committed = SMOLLM2_REFERENCE.parents[2] / "benchmarks/results/search_smollm2_10pairs/adapter"
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (SMOLLM2_REFERENCE / name).read_bytes() == (committed / name).read_bytes()
    config = rope_adapter.load_lrs_config(SMOLLM2_REFERENCE)
    assert config.num_layers == 30 and config.provenance["method"] == "bezier-nsga2"
