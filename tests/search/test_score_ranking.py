"""`benchmarks/score_ranking.py`: rank agreement with paired bootstrap differences, and a resumed ranking never mixes dtypes."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest
from scipy import stats
from testkit.eval_runs import BENCHMARKS, load_benchmark
from testkit.searches import cli_args, small

from rope_adapter.search import run_search


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


def test_rank_agreement_compares_every_score_with_the_default_on_the_same_draws(ranking):
    target = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    scores = {
        "answer": np.array([0.2, 0.1, 0.4, 0.3, 0.6, 0.5, 0.8, 0.7]),  # neighbours swapped: rho < 1
        "tf_accuracy": target * 2,  # same order as the target
        "reversed": -target,
    }
    agreement = ranking.rank_agreement(scores, target, resamples=500)
    assert agreement["tf_accuracy"]["spearman"] == pytest.approx(1.0)
    assert agreement["reversed"]["spearman"] == pytest.approx(-1.0)
    answer_rho = agreement["answer"]["spearman"]
    assert 0.8 < answer_rho < 1.0
    assert "vs_reference" not in agreement["answer"]
    better = agreement["tf_accuracy"]["vs_reference"]
    assert better["difference"] == pytest.approx(1.0 - answer_rho)
    low, high = better["difference_ci"]
    assert 0.0 <= low <= better["difference"] <= high
    assert better["share_better"] > 0.5
    worse = agreement["reversed"]["vs_reference"]
    assert worse["difference_ci"][1] < 0 and worse["share_better"] == 0.0
    lo, hi = agreement["answer"]["spearman_ci"]
    assert lo <= answer_rho <= hi


def test_the_batched_spearman_is_scipys_with_ties(ranking):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, (50, 9)).astype(float)  # many ties
    y = rng.normal(size=(50, 9))
    y[:, :3] = 0.0
    expected = [stats.spearmanr(a, b).statistic if len(set(a)) > 1 else np.nan for a, b in zip(x, y, strict=True)]
    np.testing.assert_allclose(ranking._spearman(x, y), expected, atol=1e-12)


def test_rank_agreement_of_a_constant_score_is_undefined_not_an_error(ranking):
    target = np.array([0.1, 0.2, 0.3, 0.4])
    agreement = ranking.rank_agreement({"answer": target, "flat": np.ones(4)}, target, resamples=50)
    assert np.isnan(agreement["flat"]["spearman"])
    assert agreement["answer"]["spearman"] == pytest.approx(1.0)


def test_a_ranking_rescores_a_real_study_reproduces_its_means_and_resumes(ranking, tmp_path, tiny_llama_dir):
    """On a tiny search's own study: every re-scored trial's ``answer`` mean is the study's stored search-set mean
    (same code, same records, same dtype), a rerun scores nothing again, and the report is written from the rows."""
    settings = small(tmp_path / "search", tiny_llama_dir, sampler="tpe", trials=6, race=(), s_max=3.0)
    run_search(settings)
    out = tmp_path / "ranking"
    argv = ["--storage", settings.storage_url(), "--trials", "4", "--out", str(out), "--", *cli_args(settings)]
    assert ranking.main(argv) == 0
    rows = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and len({r["trial"] for r in rows}) == 4
    for row in rows:
        assert row["search"]["answer"] == pytest.approx(row["stored_search_mean"], abs=1e-5)
        assert row["dtype"] == settings.model.dtype and row["seconds"] > 0
        assert 0.0 <= row["holdout_tf_accuracy"] <= 1.0
    data = json.loads((out / "score_ranking.json").read_text())
    assert data["study"]["trials_scored"] == 4 and data["trials_without_seconds"] == 0
    assert set(data["agreement"]) == set(rows[0]["search"])
    assert "vs_reference" in data["agreement"]["tf_accuracy"]
    assert (out / "score_ranking.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    written = (out / "trials.jsonl").read_text()
    assert ranking.main(argv) == 0  # resumes: every trial is in trials.jsonl already
    assert (out / "trials.jsonl").read_text() == written
    assert "| answer |" in (out / "score_ranking.md").read_text()


def test_a_report_only_run_reads_trials_jsonl_without_loading_the_model(ranking, tmp_path, tiny_llama_dir, monkeypatch):
    """``--report-only`` on a ranking the script wrote: the same agreement, held-out record count and figure, and
    the model never loads (a Qwen ranking's report then takes seconds, not the minutes of a model load)."""
    settings = small(tmp_path / "search", tiny_llama_dir, sampler="tpe", trials=5, race=(), s_max=3.0)
    run_search(settings)
    out = tmp_path / "ranking"
    argv = ["--storage", settings.storage_url(), "--trials", "4", "--out", str(out), "--", *cli_args(settings)]
    assert ranking.main(argv) == 0
    scored = json.loads((out / "score_ranking.json").read_text())
    (out / "score_ranking.png").unlink()

    def refuse(*args, **kwargs):
        raise AssertionError("--report-only loaded the model")

    monkeypatch.setattr(ranking, "make_worker", refuse)
    assert ranking.main([*argv[: argv.index("--")], "--report-only", *argv[argv.index("--") :]]) == 0
    report = json.loads((out / "score_ranking.json").read_text())
    assert json.dumps(report["agreement"]) == json.dumps(scored["agreement"])  # NaN where a score is constant
    assert report["trials"] == scored["trials"]
    assert report["holdout_records"] == scored["holdout_records"] == settings.holdout_records
    assert (out / "score_ranking.png").is_file()
