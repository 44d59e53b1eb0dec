"""A search over several record lengths, as the card and the export read it: a tiny two-length study (``--pairs 2 3``,
confirmed on its top curve) writes its adapter, results record and provenance; the card, ``results_table.json`` and
an export show every gold position as ``"pairs:position"`` (never the study's internal keys), and the provenance
carries the chosen curve's confirmation score, per length too. A single-length study writes no labels."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from testkit.searches import small

from rope_adapter.export import export_model
from rope_adapter.export.card import build_card
from rope_adapter.files import dumps_json
from rope_adapter.provenance import ConfirmedScores, Provenance
from rope_adapter.records import check_record
from rope_adapter.scoring.results_table import RESULTS_TABLE_NAME, ResultsTable
from rope_adapter.search import run_search
from rope_adapter.search.adapter_provenance import provenance as provenance_of

LABELS = {"200000": "2:0", "200001": "2:1", "300000": "3:0", "300002": "3:2"}
"""The (length, position) keys of the study below (pairs * 100000 + position) and how every reader shows them."""
KEY = re.compile(r"\b[23]0000[0-2]\b")


@pytest.fixture(scope="module")
def study(tmp_path_factory, model_dir) -> Path:
    """OUT of a finished tiny search over 2 and 3 pairs, two gold positions each, confirmed on its top curve."""
    settings = small(
        tmp_path_factory.mktemp("lengths-card"), model_dir, pairs=(2, 3), num_positions=2, trials=7, confirm_top=1
    )
    result = run_search(settings)
    assert result.adapter_dir is not None
    return Path(settings.out)


def test_the_search_writes_position_labels_and_the_confirmation_score(study):
    report = json.loads((study / "search_report.json").read_text())
    assert report["task"]["position_labels"] == LABELS
    provenance = json.loads((study / "adapter" / "adapter_config.json").read_text())["provenance"]
    check_record(provenance, Provenance, "adapter_config.json")
    assert provenance["task"]["position_labels"] == LABELS
    confirmed = provenance["scores"]["confirmation"]
    check_record(confirmed, ConfirmedScores, "adapter_config.json", "provenance.scores.confirmation")
    chosen = report["confirmation"]["found"]
    candidate = next(c for c in report["confirmation"]["candidates"] if c["trial"] == chosen)
    assert provenance["study"]["trial"] == chosen
    assert confirmed["mean"] == pytest.approx(candidate["confirmation"]["mean"])
    assert confirmed["worst"] == pytest.approx(candidate["confirmation"]["worst"])
    assert set(confirmed["by_position"]) == set(LABELS) and confirmed["records"] == report["confirmation"]["records"]
    assert set(confirmed["by_length"]) == {"2", "3"}
    for pairs, at in confirmed["by_length"].items():
        mine = [v for k, v in confirmed["by_position"].items() if k.startswith(pairs)]
        assert at["mean"] == pytest.approx(sum(mine) / len(mine)) and at["worst"] == pytest.approx(min(mine))
    assert confirmed["search_found"] == report["confirmation"]["search_found"]
    table = ResultsTable.read(study / "adapter")
    assert table.position_labels == LABELS and [table.position_label(p) for p in table.positions] == list(
        LABELS.values()
    )


def test_the_card_shows_pairs_and_positions_not_keys(study):
    card = build_card(study / "adapter", repo_id="org/tiny-lengths")
    text = str(card)
    assert not KEY.search(text), KEY.search(text)  # no internal key anywhere: prose, tables or model-index
    assert "| gold 2:0 | gold 2:1 | gold 3:0 | gold 3:2 | all positions |" in text
    assert "a column *gold N:P* is the records of N key-value pairs" in text
    assert "Lost in the Middle KV retrieval, 2, 3 pairs (held-out records of the search)" in text
    assert "Task: KV retrieval, 2, 3 key-value pairs (one study over these record lengths), " in text
    assert "gold positions (pairs:position) 2:0, 2:1, 3:0, 3:2" in text
    assert "Score on the search records: mean " in text and "by gold position (pairs:position) 2:0: " in text
    confirmation = json.loads((study / "search_report.json").read_text())["confirmation"]
    where = f"Score on the {confirmation['records']} confirmation records"
    alone = (
        f"{where}, on which the curve was chosen (the search records alone chose trial {confirmation['search_found']})"
    )
    line = next(x for x in text.splitlines() if x.startswith(f"- {alone}: mean "))
    assert "by gold position (pairs:position) 2:0: " in line
    assert re.search(f"- {where} by record length: 2 pairs: mean [^;]+, worst [^;]+; 3 pairs: mean [^;]+, worst ", text)
    # in the order a reader follows: the objectives, the search records, then the confirmation records
    assert text.index("Objectives (maximised)") < text.index("Score on the search records") < text.index(where)
    types = {m["type"] for r in card.data.to_dict()["model-index"][0]["results"] for m in r["metrics"]}
    assert "tf_accuracy@position_3:2" in types


def test_an_export_of_the_adapter_keeps_the_labels(study, model_dir, tmp_path):
    out = tmp_path / "exported"
    export_model(model_dir, study / "adapter", out, verify=False)
    (out / RESULTS_TABLE_NAME).write_bytes((study / "adapter" / RESULTS_TABLE_NAME).read_bytes())
    text = str(build_card(out, repo_id="org/tiny-lengths-merged"))
    assert not KEY.search(text), KEY.search(text)
    assert "| gold 2:0 |" in text and "gold positions (pairs:position) 2:0, 2:1, 3:0, 3:2" in text


def test_a_confirmation_score_that_is_not_finite_is_stored_as_null(study):
    report = json.loads((study / "search_report.json").read_text())
    chosen = report["chosen"]["number"]
    for candidate in report["confirmation"]["candidates"]:
        if candidate["trial"] == chosen:
            candidate["confirmation"]["worst"] = math.nan
            candidate["by_position"]["300002"] = -math.inf
    provenance = provenance_of(report)
    confirmed = provenance["scores"]["confirmation"]
    assert confirmed["worst"] is None and confirmed["by_position"]["300002"] is None
    assert confirmed["by_length"]["3"] == {"mean": None, "worst": None}
    dumps_json(provenance, where="provenance")  # strict JSON: refuses NaN and infinities
    check_record(provenance, Provenance, "adapter_config.json", null_numbers=True)


def test_a_single_length_study_writes_no_labels(tmp_path, model_dir):
    settings = small(tmp_path, model_dir, pairs=3, num_positions=2, trials=7, confirm_top=1)
    run_search(settings)
    out = Path(settings.out)
    provenance = json.loads((out / "adapter" / "adapter_config.json").read_text())["provenance"]
    assert "position_labels" not in provenance["task"] and "by_length" not in provenance["scores"]["confirmation"]
    assert "position_labels" not in json.loads((out / "adapter" / RESULTS_TABLE_NAME).read_text())
    text = str(build_card(out / "adapter"))
    assert "| gold 0 | gold 2 | all positions |" in text and "pairs:position" not in text
    assert "Task: KV retrieval, 3 key-value pairs, gold positions 0, 2, " in text
    assert "- Score on the 4 confirmation records, on which the curve was chosen (the search records alone " in text
    assert "by record length" not in text
