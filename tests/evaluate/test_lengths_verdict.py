"""`benchmarks/lengths_verdict.py` on the real outputs of a tiny search over two lengths and of `rope-adapter eval`
runs laid out as `benchmarks/verdict_qwen_lengths.sh` writes them: each length pools the study's held-out split at
that length with the fresh sets of that length, the last row pools every set, a set is paired as
`rope-adapter compare` pairs it, and a missing set stops the verdict instead of shrinking it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from testkit.eval_runs import eval_runner, load_benchmark
from testkit.litm_files import write_kv_file
from testkit.searches import small

from rope_adapter.evaluate import pooling as pairing
from rope_adapter.search import run_search

SETS = ["gen-2", "gen-3", "gen-4", "litm-3"]


@pytest.fixture(scope="module")
def verdict(tmp_path_factory):
    root = tmp_path_factory.mktemp("lengths-verdict")
    run = eval_runner(root, num_samples=3, num_positions=2, seed=31, scores="tf_accuracy,logprob")
    study = root / "study"
    settings = small(study, root / "model", pairs=(2, 3), num_positions=2, search_records=4, trials=6, confirm_top=1)
    report = run_search(settings).report
    uniform = f"uniform:{report['baselines']['best_uniform']['uniform']:g}"
    specs = {"base": "base", "uniform": uniform, "found": f"found=adapter:{study / 'adapter'}"}
    litm = write_kv_file(root / "kv-3.jsonl", num_records=6, num_pairs=3)
    rng = np.random.default_rng(0)
    for name in SETS:
        kind, n = name.split("-")
        for v, spec in specs.items():
            # the Lost in the Middle set has fewer records than the generated ones, as in the Qwen study's design
            options = {"num_pairs": int(n)} if kind == "gen" else {"data": str(litm), "seed": 0, "num_samples": 2}
            run(f"study/verdict/{name}/{v}", spec, **options)
    run("study/verdict/greedy-2", ",".join(specs.values()), num_pairs=2, num_samples=2, scores="accuracy,tf_accuracy")
    # a tiny random model answers nothing: give the eval files' samples varied verdicts (their format unchanged), so
    # that every comparison below is between numbers that differ
    for path in (study / "verdict").rglob("results.json"):
        data = json.loads(path.read_text())
        for sample in data["samples"]:
            for metric in ("tf_accuracy", "accuracy"):
                if metric in sample:
                    sample[metric] = float(rng.integers(0, 2))
        path.write_text(json.dumps(data))
    module = load_benchmark("lengths_verdict")
    module.main([str(study), "--sets", *SETS])
    data = json.loads((study / "verdict" / "verdict" / "verdict.json").read_text())
    return module, study, report, uniform, data


def test_each_length_pools_its_held_out_split_and_fresh_sets(verdict):
    _, _, report, uniform, data = verdict
    assert data["uniform"] == uniform
    lengths = {c["length"]: c for c in data["pooled"]}
    # each named as the headline's other curves: the model, the study's lengths, its chosen trial and adapter
    assert {(c["model"], c["name"]) for c in data["pooled"]} == {
        ("model", f"study over 2 and 3 pairs, trial {report['chosen']['number']} (`study/adapter`)")
    }
    assert list(lengths) == [
        "KV retrieval, 2 pairs (searched)",
        "KV retrieval, 3 pairs (searched)",
        "KV retrieval, 4 pairs (not searched)",
        "every set",
    ]
    held_out = report["holdout"]["records"]
    records = {k: c["pooled"]["found - best_uniform"]["records"] for k, c in lengths.items()}
    assert records == {
        "KV retrieval, 2 pairs (searched)": held_out + 3,
        "KV retrieval, 3 pairs (searched)": held_out + 3 + 2,  # the split, gen-3 and the 3-key file
        "KV retrieval, 4 pairs (not searched)": 3,
        "every set": held_out + 3 * 3 + 2,  # the split once (each record over both lengths) and every fresh set
    }
    # the last row pools every set: its difference is the record-weighted mean of the sets' differences
    every = lengths["every set"]
    parts = [(s["found - best_uniform"]["records"], s["found - best_uniform"]["diff"]) for s in every["per_set"]]
    pooled = every["pooled"]["found - best_uniform"]
    assert pooled["diff"] == pytest.approx(sum(n * d for n, d in parts) / sum(n for n, _ in parts), abs=1e-12)
    assert any(d != 0 for _, d in parts)
    # the split at one length is that length's held-out differences, not the pooled ones
    at_2 = lengths["KV retrieval, 2 pairs (searched)"]["per_set"][0]["found - base"]
    stored = report["holdout"]["by_length"]["2"]["found-base"]["tf_accuracy"]["mean"]
    assert at_2["diff"] == pytest.approx(stored["diff"]) and at_2["records"] == stored["n_records"]


def test_a_set_is_paired_as_rope_adapter_compare_pairs_it(verdict):
    module, study, _, uniform, data = verdict
    paths = [study / "verdict" / "gen-3" / v / "results.json" for v in module.VARIANTS]
    row = pairing.compare(pairing.load_runs(paths), "found", uniform, "tf_accuracy")
    mine = next(r for r in data["sets"] if r["set"] == "gen-3" and r["reference"] == uniform)
    assert mine["mean"] == row["mean"] and mine["bootstrap_low"] == row["bootstrap_low"]
    pooled_row = next(c for c in data["pooled"] if c["length"] == "KV retrieval, 3 pairs (searched)")
    gen3 = next(s for s in pooled_row["per_set"] if "seed 31" in s["set"])["found - best_uniform"]
    assert gen3["diff"] == pytest.approx(row["mean"], abs=1e-12)
    assert (gen3["ci_low"], gen3["ci_high"]) == pytest.approx((row["ci_low"], row["ci_high"]), abs=1e-12)


def test_greedy_runs_report_their_agreement_with_the_teacher_forced_verdict(verdict):
    _, study, _, _, data = verdict
    (greedy,) = data["greedy"]
    assert greedy["set"] == "greedy-2"
    assert {v: t for v, (_, t) in greedy["agreement"].items()} == {"base": 4, data["uniform"]: 4, "found": 4}
    samples = json.loads((study / "verdict" / "greedy-2" / "results.json").read_text())["samples"]
    for variant, (agree, _) in greedy["agreement"].items():
        mine = [s for s in samples if s["variant"] == variant]
        assert agree == sum(s["accuracy"] == s["tf_accuracy"] for s in mine)
        assert greedy["accuracy"][variant] == pytest.approx(np.mean([s["accuracy"] for s in mine]))
    text = (study / "verdict" / "verdict" / "verdict.md").read_text()
    assert "## Greedy decoding" in text and "every set" in text and "| gen-4 |" in text


def test_a_missing_set_stops_the_verdict(verdict):
    module, study, _, _, _ = verdict
    with pytest.raises(SystemExit, match=r"set 'gen-5' is incomplete: missing .*gen-5/base/results.json"):
        module.main([str(study), "--sets", "gen-2", "gen-5", "--out", str(study / "elsewhere")])
    assert not (study / "elsewhere").exists()


def test_the_headline_pools_a_study_as_its_verdict_does_and_names_no_local_path(verdict, tmp_path):
    """``pooled_headline.lengths_curves`` (how a study over several lengths joins the README's headline) gives the
    verdict's pooled rows, and its files are named relative to the repository root."""
    module, study, _, _, data = verdict
    root = tmp_path / "repo"
    (root / "benchmarks" / "results").mkdir(parents=True)
    (root / "benchmarks" / "results" / "tiny-lengths").symlink_to(study)
    headline = load_benchmark("pooled_headline")
    curves = headline.lengths_curves("tiny-lengths", SETS, root)
    named = [f for c in curves for s in c.sets for f in (s.runs or (s.report,))]
    assert named and all(f.startswith("benchmarks/results/tiny-lengths/") for f in named), named
    fresh = json.loads(json.dumps([headline.evaluate_curve(c, root) for c in curves]))
    assert [c["pooled"] for c in fresh] == [c["pooled"] for c in data["pooled"]]
    assert [c["length"] for c in fresh] == [c["length"] for c in data["pooled"]]
    # the headline's own list of curves reaches the study through the same call, after the single-length curves
    every = headline.all_curves(root, {"tiny-lengths": tuple(SETS)})
    assert every[: len(headline.CURVES)] == headline.CURVES
    # (each load of the sibling modules defines its own Curve class: compare the fields)
    assert [dataclasses.asdict(c) for c in every[len(headline.CURVES) :]] == [dataclasses.asdict(c) for c in curves]
