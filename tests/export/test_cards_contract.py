"""Contract: the model card reads what the writers really write.

A tiny search (the settings of tests/search/test_study.py's ``small``) and a tiny ``rope-adapter eval`` run on a tiny
random Llama; their files, as written, make the cards of the adapter folder and of an export: model-index
entries carry numbers, and no absolute path reaches the card or any published file.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from testkit.hub_server import hub_for_test
from testkit.searches import small
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter.cli import main
from rope_adapter.export import export_model
from rope_adapter.export.card import build_card
from rope_adapter.export.card_data import read_folder
from rope_adapter.export.hub import publishable_files, push_folder
from rope_adapter.provenance import SECTIONS, HeldOutScores, Provenance, ProvenanceTask, SearchScores
from rope_adapter.scoring.results_table import RESULTS_TABLE_NAME, ResultsTable
from rope_adapter.search import report_types, run_search

ABSOLUTE_PATH = re.compile(r"(?<![\w/.~<>-])/(?:tmp|home|root|var|private|Users|work)/")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """A finished tiny search (OUT/adapter) and an eval of base, a uniform factor and the found adapter."""
    root = tmp_path_factory.mktemp("contract")
    model_dir = root / "tiny-llama"
    tiny_model("llama", num_layers=4).save_pretrained(model_dir)
    byte_tokenizer().save_pretrained(model_dir)
    settings = small(root / "search", model_dir)  # the tiny search of test_study, on this module's own model
    result = run_search(settings)
    assert result.adapter_dir is not None
    rc = main(
        ["eval", "--model", str(model_dir), "--num-pairs", "3", "--num-positions", "3", "--num-samples", "2"]
        + ["--variants", f"base,uniform:1.2,adapter:{result.adapter_dir}", "--scores", "accuracy,tf_accuracy,logprob"]
        + ["--out", str(root / "eval"), "--no-progress", "--device", "cpu"]
    )
    assert rc == 0
    return {"root": root, "model": model_dir, "adapter": result.adapter_dir, "eval": root / "eval"}


def metrics_of(card) -> dict[str, list[dict]]:
    """model-index metrics by dataset split."""
    index = card.data.to_dict().get("model-index") or []
    return {r["dataset"]["split"]: r["metrics"] for entry in index for r in entry["results"]}


def assert_no_absolute_path(text: str, root: Path) -> None:
    assert str(root) not in text and str(root.resolve()) not in text
    assert not ABSOLUTE_PATH.search(text), ABSOLUTE_PATH.search(text)


def test_the_search_writes_what_the_card_needs_into_the_adapter_folder(written):
    import optuna

    study = optuna.load_study(study_name="lrs-search", storage=f"sqlite:///{written['root'] / 'search' / 'study.db'}")
    assert study.metric_names == ["mean", "worst"]  # what optuna-dashboard shows for the objective values
    adapter = written["adapter"]
    assert {RESULTS_TABLE_NAME, "factors.png", "positions.png"} <= {p.name for p in adapter.iterdir()}
    table = ResultsTable.read(adapter)
    assert table.source == "search-holdout" and [v.name for v in table.variants] == ["base", "best_uniform", "found"]
    report = json.loads((adapter.parent / "search_report.json").read_text())
    found = table.metric(report["holdout"]["score"])
    assert found.cells["found"]["0"].mean == pytest.approx(report["holdout"]["configs"]["found"]["by_position"]["0"])


def test_every_key_the_writers_write_reaches_the_record_or_is_named_as_left_out(written):
    """The writers' builders are the only code that reads their outputs' keys: a key the held-out step or the
    eval adds is in the record, or named as knowingly left out, or this test fails (it never misses the card
    silently)."""
    from rope_adapter.evaluate import results_record as eval_record
    from rope_adapter.search import results_record as search_record

    holdout = json.loads((written["adapter"].parent / "search_report.json").read_text())["holdout"]
    sets = (search_record.HOLDOUT_KEYS, search_record.CONFIG_KEYS, search_record.DIFFERENCE_KEYS)
    named = [s["shown"] | s["left out"] for s in sets]
    assert set(holdout) <= named[0], set(holdout) - named[0]
    for config in holdout["configs"].values():
        assert set(config) <= named[1], set(config) - named[1]
    for difference in holdout["differences"].values():
        assert set(difference) <= named[2], set(difference) - named[2]
    table = ResultsTable.read(written["adapter"])
    shown = {m.name.split("@")[0] for m in table.metrics}
    for metric, key, _, _ in search_record.LAYOUT:
        if metric and metric != holdout["score"] and any(key in c for c in holdout["configs"].values()):
            assert metric in shown, metric  # (the whole-answer log-prob is the score itself when the score is it)
    data = json.loads((written["eval"] / "results.json").read_text())
    assert set(data) <= eval_record.READS | eval_record.LEAVES_OUT, set(data) - eval_record.READS
    record = ResultsTable.embedded_in(data)
    assert record == ResultsTable.read(written["eval"])  # results.json carries the record results_table.json holds
    assert [m.name for m in record.metrics] == data["metrics"] == ["accuracy", "tf_accuracy", "logprob"]
    assert [v.name for v in record.variants] == [v["name"] for v in data["variants"]]


def keys_of(typed: type) -> tuple[frozenset, frozenset]:
    """(required, every) key of a TypedDict."""
    return typed.__required_keys__, typed.__required_keys__ | typed.__optional_keys__


def test_the_search_writes_its_report_and_provenance_as_their_one_definition_says(written):
    """search_report.json and the adapter's provenance have the keys of their TypedDicts (search/report_types.py,
    rope_adapter/provenance.py), which the card, the plots and the Markdown read: a key a writer adds without
    adding it there fails here."""
    report = json.loads((written["adapter"].parent / "search_report.json").read_text())
    for typed, value in (
        (report_types.SearchReport, report),
        (report_types.ModelSummary, report["model"]),
        (report_types.StudySummary, report["study"]),
        (report_types.TimingSummary, report["timing"]),
        (report_types.Baselines, report["baselines"]),
        (report_types.ChosenCurve, report["chosen"]),
        (report_types.Holdout, report["holdout"]),
        (ProvenanceTask, report["task"]),
        *((report_types.HoldoutConfig, c) for c in report["holdout"]["configs"].values()),
        *((report_types.ConfigSummary, c) for c in report["baselines"]["uniform"]),
    ):
        required, every = keys_of(typed)
        assert required <= set(value) <= every, (typed.__name__, set(value) ^ every)
    provenance = json.loads((written["adapter"] / "adapter_config.json").read_text())["provenance"]
    assert set(provenance) == set(keys_of(Provenance)[1])  # the search writes every section
    for key, typed in SECTIONS.items():
        assert set(provenance[key]) <= keys_of(typed)[1], (key, set(provenance[key]) - keys_of(typed)[1])
    scores = provenance["scores"]
    assert set(scores["search"]) <= keys_of(SearchScores)[1] and set(scores["holdout"]) <= keys_of(HeldOutScores)[1]


def test_the_card_shows_every_section_of_the_provenance_the_search_wrote(written):
    provenance = json.loads((written["adapter"] / "adapter_config.json").read_text())["provenance"]
    text = str(build_card(written["adapter"], repo_id="org/tiny-lrs"))
    method = "Method: Bézier curve of the layer index, searched with a constrained Gaussian-process sampler (Optuna)"
    assert f"{method} (`bezier-gp`)" in text  # the default sampler of a new study
    assert (
        f"Curve: degree {provenance['curve']['degree']}, {provenance['curve']['x_mode']} control-point depths" in text
    )
    study = provenance["study"]
    assert f"Optuna study: `{study['name']}`, trial {study['trial']}, sampler {study['sampler']}, " in text
    assert f"seed {study['seed']}, storage sqlite:///study.db" in text  # the file name, no local path
    task = provenance["task"]
    assert f"Task: KV retrieval, {task['pairs']} key-value pairs, gold positions 0, 1, 2, " in text
    assert f"{task['search_records']} search / {task['holdout_records']} held-out records" in text
    assert f"data seed {task['data_seed']}, score {task['score']}" in text
    assert "Objectives (maximised): mean, worst" in text and "Score on the search records: mean " in text
    for x, y in provenance["curve"]["control_points"]:
        assert f"| {x:.4f} | {y:.4f} |" in text  # the control-point table


def test_card_of_the_searched_adapter_carries_the_held_out_results(written):
    card = build_card(written["adapter"], repo_id="org/tiny-lrs")
    held_out = metrics_of(card)["held-out"]
    values = {m["type"]: m["value"] for m in held_out}
    assert {"tf_accuracy", "answer", "tf_accuracy@position_0"} <= set(values)
    assert all(isinstance(v, float) for v in values.values())
    text = str(card)
    assert "## Held-out results of the search" in text and "**found (trial" in text
    assert "| base (all factors 1) |" in text and "| best uniform (" in text and " − base (all factors 1) |" in text
    assert_no_absolute_path(text, written["root"])


def test_card_with_eval_results_placed_in_the_folder(written, tmp_path):
    folder = tmp_path / "adapter"
    shutil.copytree(written["adapter"], folder)
    shutil.copyfile(written["eval"] / "results.json", folder / "results.json")
    card = build_card(folder, repo_id="org/tiny-lrs")
    by_split = metrics_of(card)
    assert set(by_split) == {"held-out", "evaluation"}
    evaluation = {m["type"]: m["value"] for m in by_split["evaluation"]}
    assert {"accuracy", "tf_accuracy", "logprob", "logprob@position_2"} <= set(evaluation)
    eval_data = json.loads((folder / "results.json").read_text())
    adapter_name = eval_data["variants"][2]["name"]
    expected = eval_data["summary"][adapter_name]["logprob"]["overall"]["mean"]
    assert evaluation["logprob"] == pytest.approx(expected)
    text = str(card)
    assert "## Evaluation (`rope-adapter eval`)" in text and f"**{adapter_name}**" in text
    assert_no_absolute_path(text, written["root"])
    for name, source in publishable_files(read_folder(folder)).items():
        content = source if isinstance(source, bytes) else Path(source).read_bytes()
        if name.endswith(".json"):
            assert_no_absolute_path(content.decode(), written["root"])


def test_card_of_an_export_with_the_results_beside_it(written, tmp_path):
    out = tmp_path / "exported"
    export_model(written["model"], written["adapter"], out, verify=False)
    shutil.copyfile(written["adapter"] / RESULTS_TABLE_NAME, out / RESULTS_TABLE_NAME)
    card = build_card(out, repo_id="org/tiny-lrs-merged")
    assert card.data.to_dict()["library_name"] == "transformers"
    assert {m["type"] for m in metrics_of(card)["held-out"]} >= {"tf_accuracy", "answer"}
    assert_no_absolute_path(str(card), written["root"])
    files = publishable_files(read_folder(out))
    sidecar = json.loads(files["lrs_export.json"]) if isinstance(files["lrs_export.json"], bytes) else None
    assert sidecar is not None and sidecar["base_model"] is None  # a local random model has no public name
    assert_no_absolute_path(json.dumps(sidecar), written["root"])


@pytest.fixture
def hub(tmp_path, monkeypatch):
    yield from hub_for_test(tmp_path, monkeypatch)


def test_push_of_the_search_adapter_publishes_its_results(written, hub):
    push_folder(written["adapter"], "org/tiny-lrs", token=hub.token)
    files = hub.files("org/tiny-lrs")
    assert RESULTS_TABLE_NAME in files and "positions.png" in files
    readme = files["README.md"].decode()
    assert "model-index" in readme and "## Held-out results of the search" in readme
    for name, content in files.items():
        if name.endswith((".json", ".md")):
            assert_no_absolute_path(content.decode(), written["root"])
