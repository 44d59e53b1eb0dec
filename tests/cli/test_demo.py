"""`rope-adapter demo` end to end on a tiny random model: every step runs, the report holds the numbers and the
commands, the exported folder loads without PEFT, and each printed command reruns its step alone."""

from __future__ import annotations

import json
import shlex

import pytest
import torch
from peft import PeftModel
from testkit.tiny_models import byte_tokenizer, tiny_model
from transformers import AutoModelForCausalLM

import rope_adapter
from rope_adapter.cli import main
from rope_adapter.export.reading import read_exported_factors


def test_demo_end_to_end_on_a_tiny_model(tmp_path, capsys):
    model_dir = tmp_path / "tiny-llama"
    tiny_model("llama", num_layers=3).save_pretrained(model_dir)
    byte_tokenizer().save_pretrained(model_dir)
    out = tmp_path / "demo-report"

    rc = main(
        ["demo", "--model", str(model_dir), "--out", str(out), "--pairs", "3", "--positions", "0", "2"]
        + ["--trials", "3", "--search-records", "1", "--eval-records", "2"]
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
    assert names[0] == "base" and names[1].startswith("uniform:") and names[2].startswith("adapter:")
    assert heldout["settings"]["seed"] == 2  # fresh records, not the base eval's (seed 1)
    for entry in heldout["summary"].values():
        assert set(entry["logprob"]["by_position"]) == {"0", "2"}

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
