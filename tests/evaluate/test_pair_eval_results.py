"""`benchmarks/pair_eval_results.py` on what `rope-adapter eval` really writes: runs on the same samples are
joined, runs on other seeds add records, and runs that cannot be pooled are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from testkit.eval_runs import eval_runner, load_benchmark


@pytest.fixture(scope="module")
def pairing():
    return load_benchmark("pair_eval_results")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    run = eval_runner(tmp_path_factory.mktemp("pair-eval"), num_samples=2)
    return {
        "seed1": run("seed1", "base,uniform:1.5", seed=1),
        "seed1-found": run("seed1-found", "found=uniform:1.2", seed=1),
        "seed2": run("seed2", "base,found=uniform:1.2", seed=2),
        "pairs4": run("pairs4", "base,found=uniform:1.2", seed=3, num_pairs=4),
    }


def _by_record(paths: list[Path], variant: str, reference: str, metric: str) -> list[float]:
    """Each record's mean over its positions of ``variant - reference``, straight from the samples."""
    values: dict[str, dict[tuple[str, int], float]] = {variant: {}, reference: {}}
    for path in paths:
        for s in json.loads(path.read_text())["samples"]:
            if s["variant"] in values:
                values[s["variant"]][(s["record_id"], s["position"])] = s[metric]
    records: dict[str, list[float]] = {}
    for key, value in values[variant].items():
        records.setdefault(key[0], []).append(value - values[reference][key])
    return [float(np.mean(v)) for v in records.values()]


def test_pooled_runs_count_each_record_once(pairing, runs):
    paths = [runs["seed1"], runs["seed1-found"], runs["seed2"]]
    pooled = pairing.load_runs(paths)
    for metric in ("logprob", "accuracy"):
        row = pairing.compare(pooled, "found", "base", metric)
        assert row["records"] == 4 and row["samples"] == 12
        assert row["seeds"] == ["kv-seed1", "kv-seed2"]
        expected = _by_record(paths, "found", "base", metric)
        assert row["mean"] == pytest.approx(np.mean(expected))
        if np.ptp(expected) > 0:
            assert row["ci_low"] < row["mean"] < row["ci_high"]
            assert row["bootstrap_low"] <= row["mean"] <= row["bootstrap_high"]
    # uniform:1.5 was scored on seed 1 only: compared on seed 1's records only
    only = pairing.compare(pooled, "uniform:1.5", "found", "logprob")
    assert only["records"] == 2 and only["seeds"] == ["kv-seed1"]
    text = pairing.markdown([pairing.compare(pooled, "found", "base", "logprob")], paths)
    assert "| logprob | found - base | 4 (kv-seed1, kv-seed2) |" in text


def test_runs_that_cannot_be_pooled_are_refused(pairing, runs, tmp_path):
    with pytest.raises(SystemExit, match="differ in .*task_settings"):
        pairing.load_runs([runs["seed1"], runs["pairs4"]])
    changed = json.loads(runs["seed1"].read_text())
    changed["samples"][0]["logprob"] += 1.0
    copy = tmp_path / "results.json"
    copy.write_text(json.dumps(changed))
    with pytest.raises(SystemExit, match="scored before with other values"):
        pairing.load_runs([runs["seed1"], copy])
    with pytest.raises(SystemExit, match="no samples of variant 'nope'"):
        pairing.compare(pairing.load_runs([runs["seed1"]]), "nope", "base", "logprob")
