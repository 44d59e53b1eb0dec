"""`rope-adapter search`: help for every flag, flags equal to the Python API's defaults, end to end on a tiny model
saved to disk, and one-line errors for bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from testkit.tiny_models import byte_tokenizer, tiny_model
from transformers import AutoModelForCausalLM

import rope_adapter
from rope_adapter.cli import build_parser, main
from rope_adapter.search import SearchSettings
from rope_adapter.search.settings import settings_help


def search_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["search"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama-cli")
    tiny_model("llama", num_layers=4).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def test_help_explains_every_flag(capsys):
    parser = search_parser()
    for action in parser._actions:
        assert action.help and action.help != argparse.SUPPRESS and len(action.help) > 10, action.option_strings
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = capsys.readouterr().out
    for flag in ("--model", "--task", "--data", "--pairs", "--positions", "--trials", "--timeout", "--storage",
                 "--study", "--workers", "--out", "--device", "--dtype", "--batch-size", "--device-map"):  # fmt: skip
        assert flag in text
    assert "postgresql" in text and "Resuming" in text


def test_flags_cover_the_settings_with_the_same_defaults():
    from rope_adapter.cli.search import settings_from_args
    from rope_adapter.composed import flat_fields

    parser = search_parser()
    flags = {a.dest for a in parser._actions}
    settings = flat_fields(SearchSettings)
    for name, entry in settings.items():
        if entry.field.metadata.get("cli", True) is False:
            continue
        assert {"progress": "no_progress"}.get(name, name) in flags, name
    defaults = settings_from_args(parser.parse_args([]))
    assert defaults == SearchSettings() == SearchSettings.flat()
    # help texts come from the dataclasses, the parts' included
    for action in parser._actions:
        if action.dest in settings:
            assert settings_help(action.dest).replace("%", "%%") in action.help


def test_cli_end_to_end(tmp_path, model_dir, capsys):
    out = tmp_path / "out"
    code = main([
        "search", "--model", str(model_dir), "--pairs", "3", "--positions", "0", "1", "2", "--search-records", "3",
        "--holdout-records", "2", "--trials", "9", "--population", "4", "--s-max", "1.5", "--device", "cpu",
        "--out", str(out), "--no-progress", "--seed", "3",
    ])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "chosen: trial" in printed and "search_report.json" in printed
    for name in ("search_report.json", "search_report.md", "pareto.png", "factors.png", "positions.png", "study.db"):
        assert (out / name).is_file(), name
    report = json.loads((out / "search_report.json").read_text())
    chosen = report["chosen"]

    base = AutoModelForCausalLM.from_pretrained(model_dir)
    model = PeftModel.from_pretrained(base, out / "adapter")
    assert rope_adapter.get_factors(model) == pytest.approx(chosen["factors"], abs=1e-6)
    config = model.peft_config["default"]
    provenance = config.provenance
    assert provenance["method"] == "bezier-gp"  # the default sampler of a new study
    assert set(provenance["curve"]) >= {"degree", "x_mode", "control_points"}
    assert provenance["curve"]["control_points"] == chosen["control_points"]
    assert provenance["study"]["name"] == "lrs-search" and provenance["study"]["trial"] == chosen["number"]
    assert provenance["study"]["storage"].startswith("sqlite:///") and provenance["study"]["seed"] == 3
    assert provenance["study"]["sampler"].startswith("GPSampler")
    assert provenance["task"]["name"] == "kv_retrieval" and provenance["task"]["positions"] == [0, 1, 2]
    assert "holdout" in provenance["scores"] and "search" in provenance["scores"]
    with torch.inference_mode():
        ids = torch.tensor([[5, 6, 7, 8, 9]])
        assert torch.isfinite(model(input_ids=ids).logits).all()

    # the same command again resumes the finished study: nothing new to run, the outputs are rebuilt
    code = main(["search", "--model", str(model_dir), "--pairs", "3", "--positions", "0", "1", "2",
                 "--search-records", "3", "--holdout-records", "2", "--trials", "9", "--population", "4",
                 "--s-max", "1.5", "--device", "cpu", "--out", str(out), "--no-progress", "--seed", "3", "--json"])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["finished_trials"] == report["study"]["complete"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "needle"], "unknown task 'needle'"),
        (["--data", "/nonexistent/kv.jsonl.gz"], "does not exist"),
        (
            ["--storage", "postgresql+psycopg2://u:topsecret@127.0.0.1:1/db"],
            "cannot reach the study storage 'postgresql+psycopg2://u@127.0.0.1:1/db'",
        ),
        (["--s-min", "1.2", "--s-max", "1.1"], "s_min must be smaller than s_max"),
        (["--trials", "-1"], "trials must be >= 0"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path, model_dir, capsys, args, message):
    code = main(
        ["search", "--model", str(model_dir), "--pairs", "3", "--num-positions", "3", "--out", str(tmp_path), *args]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("rope-adapter: error:") and message in err and "\n" not in err
    assert "topsecret" not in err


def test_k_takes_a_count_or_all(capsys):
    parser = search_parser()
    assert parser.parse_args(["--k", "all"]).k is None  # the whole answer (SearchSettings.k = None)
    assert parser.parse_args(["--k", "3"]).k == 3
    for bad in ("0", "three"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--k", bad])
        assert "'all'" in capsys.readouterr().err
