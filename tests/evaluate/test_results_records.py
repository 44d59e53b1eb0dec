"""results.json as its writers write it and as its one typed definition (rope_adapter/evaluate/results.py) says:
the files `rope-adapter eval` writes on a tiny model (a position sweep with every score, a length sweep) and every
committed results.json are read back by ``load_results`` (strict JSON, checked against the record of their kind),
hold exactly the keys their records name, and the readers (the Markdown, the results record) read them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from testkit.records import key_problems
from testkit.tiny_models import save_model_folder, tiny_model

from rope_adapter.cli import main
from rope_adapter.errors import RecordFileError
from rope_adapter.evaluate.evaluation import load_results
from rope_adapter.evaluate.report import lengths_markdown, positions_markdown
from rope_adapter.evaluate.results import RESULTS_FILES
from rope_adapter.evaluate.results_record import position_table
from rope_adapter.scoring.results_table import ResultsTable

ROOT = Path(__file__).resolve().parents[2]
WORDS = "the river ran past a quiet town where people kept old books and told long stories".split()


def _committed() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*results.json"], cwd=ROOT, capture_output=True, text=True).stdout
    return [ROOT / p for p in listed.split() if p.endswith("/results.json")]


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """results.json of a position sweep (greedy and teacher-forced accuracy, log-prob) and of a length sweep."""
    root = tmp_path_factory.mktemp("results")
    model = save_model_folder(tiny_model("llama", num_layers=2), root / "model")
    text = root / "book.txt"
    text.write_text(" ".join(np.random.default_rng(0).choice(WORDS, size=600)))
    common = ["--model", str(model), "--no-progress", "--device", "cpu", "--no-plot"]
    positions = ["eval", "--num-pairs", "3", "--num-positions", "3", "--num-samples", "2"]
    positions += ["--variants", "base,uniform:1.2", "--scores", "accuracy,tf_accuracy,logprob"]
    assert main([*positions, *common, "--out", str(root / "positions")]) == 0
    lengths = ["eval", "--task", "perplexity", "--data", str(text), "--lengths", "64,128", "--num-windows", "2"]
    assert main([*lengths, *common, "--out", str(root / "lengths")]) == 0
    return {"positions": root / "positions" / "results.json", "lengths": root / "lengths" / "results.json"}


@pytest.mark.parametrize("kind", ["positions", "lengths"])
def test_the_eval_writes_results_json_as_its_record_says(written, kind):
    data = load_results(written[kind])
    assert data["kind"] == kind
    assert key_problems(data, RESULTS_FILES[kind]) == []
    markdown = positions_markdown(data) if kind == "positions" else lengths_markdown(data)
    assert markdown.startswith("# ") and "## Variants" in markdown


def test_the_position_sweeps_record_is_built_from_its_typed_results(written):
    data = load_results(written["positions"])
    assert position_table(data) == ResultsTable.embedded_in(data) == ResultsTable.read(written["positions"].parent)
    assert {"accuracy", "tf_accuracy", "logprob", "prediction"} <= set(data["samples"][0])


def test_every_committed_results_json_matches_its_record_and_renders():
    committed = _committed()
    assert committed
    for path in committed:
        data = load_results(path)
        assert key_problems(data, RESULTS_FILES[data["kind"]]) == [], path
        if data["kind"] == "positions":
            assert positions_markdown(data, plot_name=None).startswith("# Evaluation: ")
            position_table(data)
        else:
            assert lengths_markdown(data, plot_name=None).startswith("# Extrapolation: ")


def test_a_results_json_of_another_kind_or_shape_is_refused_naming_the_field(tmp_path, written):
    path = tmp_path / "results.json"
    text = written["positions"].read_text()
    path.write_text(text.replace('"kind": "positions"', '"kind": "sweep"', 1))
    with pytest.raises(RecordFileError, match="kind must be one of"):
        load_results(path)
    path.write_text(text.replace('"metrics": [', '"metrics": 3, "x": [', 1))
    with pytest.raises(RecordFileError, match="metrics must be a list"):
        load_results(tmp_path)
