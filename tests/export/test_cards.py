"""Model cards without a Hub: exported-model cards, local base models, readable provenance, `rope-adapter card`,
and the results table's schema. The folders come from tests/testkit/card_folders.py (the project's own writers)."""

from __future__ import annotations

import json

import pytest
from testkit.card_folders import FACTORS, factor_table, front_matter, make_adapter, make_export

from rope_adapter.cli import main
from rope_adapter.export.card import CardError, build_card
from rope_adapter.export.card_data import public_base_model, public_json, public_text
from rope_adapter.scoring.results_table import RECORD_KEY, ResultsTable, ResultsTableError


def test_card_of_custom_code_export(tmp_path):
    card = build_card(make_export(tmp_path / "export"), repo_id="org/llama-lrs-merged")
    meta = card.data.to_dict()
    assert meta["library_name"] == "transformers" and meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "custom_code" in meta["tags"]
    text = str(card)
    assert 'AutoModelForCausalLM.from_pretrained("org/llama-lrs-merged", trust_remote_code=True)' in text
    assert "`modeling_llama_lrs.py`" in text
    assert list(factor_table(text).values()) == pytest.approx(FACTORS)
    assert '`{"rope_theta": 100.0, "rope_type": "default"}`' in text  # the base RoPE, unwrapped
    assert "max abs diff `0.0`" in text


@pytest.mark.parametrize("factors_in_config", [False, True])
def test_card_of_native_export(tmp_path, factors_in_config):
    folder = make_export(tmp_path / "native", custom_code=False, factors_in_config=factors_in_config)
    text = str(build_card(folder, repo_id="org/llama-linear"))
    assert 'AutoModelForCausalLM.from_pretrained("org/llama-linear")\n' in text
    assert "trust_remote_code" not in text
    assert "equals native linear RoPE scaling with factor 1.5000" in text
    assert list(factor_table(text).values()) == [1.5] * len(FACTORS)


def test_card_refuses_export_whose_files_disagree(tmp_path):
    folder = make_export(tmp_path / "edited")
    sidecar = json.loads((folder / "lrs_export.json").read_text())
    sidecar["factors"][0] = 9.0
    (folder / "lrs_export.json").write_text(json.dumps(sidecar))
    with pytest.raises(CardError, match="disagree on the factors"):
        build_card(folder)


def test_card_refuses_export_that_would_load_without_factors(tmp_path):
    folder = make_export(tmp_path / "bad", model_type="llama")  # auto_map next to the built-in model_type
    with pytest.raises(CardError, match="WITHOUT the factors"):
        build_card(folder)


def test_card_of_an_adapter_from_a_local_base_names_no_path(tmp_path):
    base = tmp_path / "base-model"
    base.mkdir()
    (base / "README.md").write_text("---\nlicense: mit\n---\n# base\n")
    (base / "config.json").write_text(json.dumps({"model_type": "llama"}))
    card = build_card(make_adapter(tmp_path / "adapter", base=str(base), results=False))
    meta = card.data.to_dict()
    assert meta["license"] == "mit"  # read from the local copy
    assert "base_model" not in meta  # a local path is no Hub id
    text = str(card)
    assert str(tmp_path) not in text and "/home/someone" not in text
    assert "for a local copy of a `llama` model" in text
    assert 'BASE_MODEL = "..."' in text and "from_pretrained(BASE_MODEL)" in text
    assert "storage sqlite:///study.db" in text and "{" not in text.split("## How the factors were found")[1]


def test_a_local_base_that_records_its_hub_id_is_published_under_it(tmp_path):
    base = tmp_path / "copy"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"_name_or_path": "org/base-model"}))
    assert public_base_model(str(base)) == "org/base-model"
    assert public_base_model("org/base-model") == "org/base-model"
    assert public_base_model(str(tmp_path / "missing")) is None
    assert public_base_model("models--org--name/snapshots/abc") == "org/name"


def test_public_text_and_json_replace_local_paths():
    command = "rope-adapter eval --model /data/m --variants base,adapter:/runs/a/adapter --out=/tmp/o"
    assert public_text(command) == (
        "rope-adapter eval --model <local>/m --variants base,adapter:<local>/adapter --out=<local>/o"
    )
    assert public_text("sqlite:////runs/x/study.db") == "sqlite:///study.db"
    kept_texts = ("https://huggingface.co/org/name", "inv_freq / s_l", "trials/min", "adapter:runs/adapter")
    for kept in (*kept_texts, 'cd "$(dirname "$0")/../../.."', "$(pwd)/./x"):
        assert public_text(kept) == kept
    data = {"base_model_name_or_path": "/data/m", "provenance": {"study": {"storage": "sqlite:////a/b.db"}}, "n": 3}
    assert public_json(data) == {
        "base_model_name_or_path": None,
        "provenance": {"study": {"storage": "sqlite:///b.db"}},
        "n": 3,
    }


def test_card_of_results_for_other_factors_has_no_model_index(tmp_path):
    folder = make_adapter(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "results_table.json").read_text())
    for variant in config["variants"]:
        if variant["factors"]:
            variant["factors"] = [2.0] * len(FACTORS)
    (folder / "results_table.json").write_text(json.dumps(config))
    (folder / "results.json").unlink()
    card = build_card(folder)
    assert "model-index" not in card.data.to_dict()
    assert "None of these configurations has this adapter's factors" in str(card)


def test_results_table_round_trip_and_schema_version(tmp_path):
    folder = make_adapter(tmp_path / "adapter")
    table = ResultsTable.read(folder)
    assert ResultsTable.from_dict(json.loads(json.dumps(table.to_dict()))) == table
    assert table.variant_with_factors(FACTORS).name == "lrs"
    accuracy = table.metric("accuracy")
    assert accuracy.cells["lrs"]["9"].mean == pytest.approx(0.75) and accuracy.cells["lrs"]["9"].n == 4
    lrs = next(c for c in accuracy.comparisons if c.variant == "lrs")
    assert lrs.against == "base" and lrs.overall.low < lrs.overall.diff < lrs.overall.high
    newer = {**table.to_dict(), "schema_version": 99}
    with pytest.raises(ResultsTableError, match="schema version 99"):
        ResultsTable.from_dict(newer)
    (folder / "results_table.json").write_text(json.dumps(newer))
    with pytest.raises(CardError, match="schema version 99"):
        build_card(folder)


def test_the_card_reads_only_the_record_a_results_json_carries(tmp_path):
    """An eval results.json copied into a folder gives the card its record (RECORD_KEY) and nothing else: the
    same card with every other key of it gone; one written without the record is refused, not skipped."""
    folder = make_adapter(tmp_path / "adapter")
    (folder / "results_table.json").unlink()
    card = str(build_card(folder))
    assert "## Evaluation (`rope-adapter eval`)" in card
    data = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps({RECORD_KEY: data[RECORD_KEY]}))
    assert str(build_card(folder)) == card
    del data[RECORD_KEY]
    (folder / "results.json").write_text(json.dumps(data))
    with pytest.raises(CardError, match="without its results record"):
        build_card(folder)


def test_cli_card_writes_what_push_would_upload(tmp_path, capsys):
    folder = make_adapter(tmp_path / "adapter")
    out = tmp_path / "card" / "README.md"
    assert main(["card", str(folder), "--out", str(out), "--repo", "org/name"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert out.read_text() == str(build_card(folder, repo_id="org/name"))
    assert front_matter(out.read_text())["model-index"][0]["name"] == "name"
    assert main(["card", str(folder)]) == 0
    assert capsys.readouterr().out.startswith("---\n")
    assert main(["card", str(tmp_path)]) == 2
    assert "neither adapter_config.json" in capsys.readouterr().err
