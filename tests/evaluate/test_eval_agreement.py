"""`benchmarks/eval_agreement.py` on what `rope-adapter eval` really writes: two runs of the same seed in
different dtypes and record counts are compared on the samples both have; runs of other samples are refused."""

from __future__ import annotations

import json

import pytest
from testkit.eval_runs import eval_runner, load_benchmark


@pytest.fixture(scope="module")
def script():
    return load_benchmark("eval_agreement")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    run = eval_runner(tmp_path_factory.mktemp("eval-agreement"), scores="tf_accuracy,logprob")
    return {
        "f32": run("f32", "base,found=uniform:1.2", seed=1, num_samples=3),
        "bf16": run("bf16", "base,uniform:1.5", seed=1, num_samples=2, dtype="bfloat16"),
        "seed2": run("seed2", "base", seed=2, num_samples=2),
        "pairs4": run("pairs4", "base", seed=1, num_samples=2, num_pairs=4),
    }


def test_runs_are_compared_on_the_samples_and_variants_both_have(script, runs, tmp_path):
    a, b = (json.loads(runs[k].read_text()) for k in ("f32", "bf16"))
    rows = script.agreement(a, b)
    assert [r["variant"] for r in rows] == ["base"]  # the only variant both scored
    (row,) = rows
    assert row["records"] == 2 and row["samples"] == 6  # the bf16 run has 2 of the float32 run's 3 records
    shared = {(s["record_id"], s["position"]) for s in b["samples"] if s["variant"] == "base"}
    va = {(s["record_id"], s["position"]): s for s in a["samples"] if s["variant"] == "base"}
    vb = {(s["record_id"], s["position"]): s for s in b["samples"] if s["variant"] == "base"}
    assert row["same_verdict"] == sum(va[k]["tf_accuracy"] == vb[k]["tf_accuracy"] for k in shared)
    assert row["max_logprob_change"] == pytest.approx(max(abs(va[k]["logprob"] - vb[k]["logprob"]) for k in shared))
    # a run against itself agrees on everything
    (same,) = [r for r in script.agreement(a, a) if r["variant"] == "base"]
    assert same["same_verdict"] == same["samples"] == 9 and same["max_logprob_change"] == 0.0
    assert script.main([str(runs["f32"]), str(runs["bf16"]), "--out", str(tmp_path / "agr")]) == 0
    written = json.loads((tmp_path / "agr.json").read_text())
    assert written["variants"] == rows
    assert "| `base` | 2 | 6 |" in (tmp_path / "agr.md").read_text()


@pytest.mark.parametrize(
    ("other", "why"), [("seed2", "differ in task_settings"), ("pairs4", "differ in .*task_settings")]
)
def test_runs_of_other_samples_are_refused(script, runs, other, why):
    a, b = (json.loads(runs[k].read_text()) for k in ("f32", other))
    with pytest.raises(SystemExit, match=why):
        script.agreement(a, b)
