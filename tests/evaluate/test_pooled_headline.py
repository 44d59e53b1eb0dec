"""`benchmarks/pooled_headline.py`: pooling per-set summaries gives exactly the interval over all records'
raw differences, it agrees with `rope-adapter compare` on the committed Qwen runs, and the committed
headline files are what the script computes from the committed results."""

from __future__ import annotations

import json

import numpy as np
import pytest
from testkit.eval_runs import BENCHMARKS, load_benchmark

from rope_adapter.evaluate import pooling as pairing
from rope_adapter.scoring.intervals import paired_t_interval


@pytest.fixture(scope="module")
def headline():
    return load_benchmark("pooled_headline")


def test_pooling_summaries_equals_the_interval_over_all_records(headline):
    rng = np.random.default_rng(3)
    groups = [rng.normal(loc, scale, size) for loc, scale, size in ((0.05, 0.1, 40), (-0.02, 0.3, 25), (0.2, 0.05, 7))]
    parts = [headline.Summary(len(g), float(g.mean()), float(g.std(ddof=1)), {"found": 0.0}) for g in groups]
    pooled = headline.pool(parts).interval()
    everything = np.concatenate(groups)
    direct = paired_t_interval(everything, np.zeros_like(everything))
    assert pooled["records"] == everything.size == 72
    assert pooled["diff"] == pytest.approx(direct.mean, abs=1e-12)
    assert pooled["ci_low"] == pytest.approx(direct.low, abs=1e-12)
    assert pooled["ci_high"] == pytest.approx(direct.high, abs=1e-12)
    # the between-set spread counts: two sets with the same spread but other means widen the interval
    same = headline.pool([headline.Summary(30, 0.0, 0.1), headline.Summary(30, 0.0, 0.1)]).interval()
    apart = headline.pool([headline.Summary(30, -0.1, 0.1), headline.Summary(30, 0.1, 0.1)]).interval()
    assert apart["ci_high"] - apart["ci_low"] > 1.4 * (same["ci_high"] - same["ci_low"])


def test_two_committed_eval_sets_pool_as_rope_adapter_compare_pools_their_samples(headline):
    root = BENCHMARKS.parent
    folder = root / "benchmarks/results/search_qwen_50pairs_gp_bf16/heldout"
    paths = [folder / "fresh-seed7/results.json", folder / "greedy-seed8/results.json"]
    parts = [headline.summarise_runs([p], "found", "uniform:1.1") for p in paths]
    pooled = headline.pool(parts).interval()
    row = pairing.compare(pairing.load_runs(paths), "found", "uniform:1.1", "tf_accuracy")
    assert pooled["records"] == row["records"] == 80
    assert pooled["diff"] == pytest.approx(row["mean"], abs=1e-12)
    assert (pooled["ci_low"], pooled["ci_high"]) == pytest.approx((row["ci_low"], row["ci_high"]), abs=1e-12)


def test_the_committed_headline_is_what_the_committed_results_give(headline):
    committed = json.loads((BENCHMARKS / "results" / "pooled_headline" / "pooled_headline.json").read_text())
    fresh = json.loads(json.dumps([headline.evaluate_curve(c) for c in headline.all_curves()]))
    assert fresh == committed
    assert (BENCHMARKS / "results" / "pooled_headline" / "pooled_headline.md").read_text() == headline.markdown(fresh)
    # every curve's pooled records are the sum of its sets' records: no set left out
    for curve in fresh:
        sets = sum(s["found - best_uniform"]["records"] for s in curve["per_set"])
        assert curve["pooled"]["found - best_uniform"]["records"] == sets
