"""sensitivity.json and decay.json as `rope-adapter analyze` writes them and as their typed records say
(:class:`~rope_adapter.evaluate.sensitivity_report.SensitivityFile`,
:class:`~rope_adapter.evaluate.analysis.DecayCurves`): the files of a run on a tiny model and the committed
sensitivity.json hold exactly the keys their records name, and the Markdown section redraws from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from testkit.records import key_problems
from testkit.tiny_models import save_model_folder, tiny_model

from rope_adapter.cli import main
from rope_adapter.evaluate.analysis import DecayCurves
from rope_adapter.evaluate.sensitivity_report import SensitivityFile, sensitivity_lines
from rope_adapter.records import read_json

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "benchmarks" / "results").rglob("sensitivity.json"))


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("analyze")
    model = save_model_folder(tiny_model("llama", num_layers=2), root / "model")
    args = ["analyze", "--model", str(model), "--what", "sensitivity,decay", "--factors", "1.5"]
    args += ["--num-pairs", "3", "--num-positions", "2", "--num-samples", "2", "--no-progress", "--device", "cpu"]
    assert main([*args, "--out", str(root / "out")]) == 0
    return root / "out"


def test_analyze_writes_sensitivity_json_as_its_record_says(out):
    data = read_json(out / "sensitivity.json", SensitivityFile)
    assert key_problems(data, SensitivityFile) == []
    assert "written_by" in data
    assert "\n".join(sensitivity_lines(data)) in (out / "analysis.md").read_text()


def test_analyze_writes_decay_json_as_its_record_says(out):
    data = read_json(out / "decay.json", dict)
    data.pop("written_by")  # analyze's own stamp beside the curves
    assert key_problems(data, DecayCurves) == []
    assert [c["factor"] for c in data["curves"]] == [1.0, 1.5]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_sensitivity_json_matches_its_record(path):
    data = read_json(path, SensitivityFile, null_numbers=True)
    assert key_problems(data, SensitivityFile) == []
    assert sensitivity_lines(data)[0] == "## Sensitivity to each layer's factor"
