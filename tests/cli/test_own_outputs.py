"""`eval` and `analyze` replace only their own outputs in --out (rope_adapter/evaluate/own_outputs.py), and a
refused analyze writes nothing: every check runs before the first file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rope_adapter.cli import main
from rope_adapter.evaluate import evaluation as ev

EVAL = ["--num-pairs", "3", "--num-positions", "3", "--num-samples", "2", "--variants", "base,uniform:1.2"]
EVAL += ["--no-progress", "--device", "cpu"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before --out was checked")

    monkeypatch.setattr(ev, "load_model", refuse)


@pytest.mark.parametrize(
    "name, content",
    [
        ("results.json", json.dumps({"mine": 1})),
        ("results.md", "my notes\n"),
        ("results_table.json", "{}"),  # e.g. the table a search wrote into its adapter folder
        ("positions.png", "not a figure of ours"),
    ],
)
def test_eval_refuses_an_out_with_results_it_did_not_write(tmp_path, model_dir, capsys, no_model_load, name, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text(content)
    before = _snapshot(out)
    assert main(["eval", "--model", str(model_dir), *EVAL, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"holds {name}, which `rope-adapter eval` did not write" in err and "choose another --out" in err
    assert _snapshot(out) == before


def test_eval_replaces_its_own_results_and_keeps_other_files(tmp_path, model_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert main(["eval", "--model", str(model_dir), *EVAL, "--out", str(out)]) == 0
    first = json.loads((out / "results.json").read_text())
    assert main(["eval", "--model", str(model_dir), *EVAL, "--out", str(out), "--seed", "5"]) == 0  # a rerun
    assert json.loads((out / "results.json").read_text())["settings"] != first["settings"]
    assert (out / "notes.txt").read_text() == "mine\n"


def test_analyze_refuses_an_out_with_an_analysis_it_did_not_write(tmp_path, model_dir, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "analysis.md").write_text("# my own analysis\n")
    before = _snapshot(out)
    assert main(["analyze", "--model", str(model_dir), "--what", "decay", "--out", str(out)]) == 2
    assert "holds analysis.md, which `rope-adapter analyze` did not write" in capsys.readouterr().err
    assert _snapshot(out) == before


def test_analyze_replaces_its_own_outputs(tmp_path, model_dir):
    out = tmp_path / "out"
    for _ in range(2):
        assert main(["analyze", "--model", str(model_dir), "--what", "decay", "--out", str(out)]) == 0
    assert json.loads((out / "decay.json").read_text())["written_by"] == "rope-adapter analyze"
    (out / "analysis.md").unlink()  # a run killed before its last file: the stamped JSON still names the writer
    assert main(["analyze", "--model", str(model_dir), "--what", "decay", "--out", str(out)]) == 0


def test_a_refused_analyze_writes_nothing(tmp_path, model_dir, capsys):
    """The prompts are checked against the model's positions before decay.json is written (it was written first)."""
    out = tmp_path / "out"
    assert (
        main(
            ["analyze", "--model", str(model_dir), "--what", "decay,attention", "--num-pairs", "40"]
            + ["--out", str(out)]
        )
        == 2
    )
    assert "longer" in capsys.readouterr().err
    assert not out.exists()
