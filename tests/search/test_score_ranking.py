"""`benchmarks/score_ranking.py`: a resumed ranking never mixes trials re-scored in two dtypes."""

from __future__ import annotations

import optuna
import pytest
from testkit.eval_runs import BENCHMARKS, load_benchmark


@pytest.fixture
def ranking(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its neighbour search_args
    return load_benchmark("score_ranking")


def test_a_ranking_of_another_dtype_is_refused_before_any_model_loads(ranking, tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="lrs-search", storage=storage)
    out = tmp_path / "ranking"
    out.mkdir()
    rows = '{"trial": 3, "dtype": "bfloat16", "search": {}, "holdout_tf_accuracy": 0.8}\n'
    (out / "trials.jsonl").write_text(rows)
    # the model folder does not exist: loading it would fail with another error, so the refusal comes first
    argv = ["--storage", storage, "--out", str(out), "--", "--model", str(tmp_path / "no-model"), "--dtype", "float32"]
    assert ranking.main(argv) == 2
    err = capsys.readouterr().err
    assert "re-scored in bfloat16" in err and "scores in float32" in err and "another --out" in err
    assert (out / "trials.jsonl").read_text() == rows
    assert sorted(p.name for p in out.iterdir()) == ["trials.jsonl"]
