"""The factor search study: objectives, constraints, baselines, resume after SIGKILL, several workers (bad input is
in test_study_bad_input.py).

Tiny random models and a byte tokenizer; no wall-clock limits. Processes are started with the CLI
(``python -m rope_adapter.cli search``) so that they behave exactly as a user's would.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from testkit.searches import NUM_LAYERS, complete, load_trials, small, start_cli, two_workers
from testkit.tiny_models import tiny_model

from rope_adapter.scoring.logprobs import position_means
from rope_adapter.scoring.paired import differences_by_position_and_record
from rope_adapter.scoring.shared_prefix import prepare, token_logprobs
from rope_adapter.scoring.tasks import KVRetrievalTask
from rope_adapter.search import run_search
from rope_adapter.search.bezier import BezierSpace
from rope_adapter.search.constraints import FactorConstraints, LayerBound, perplexity_constraint
from rope_adapter.search.holdout import holdout_verdict
from rope_adapter.search.objective import ObjectiveSpec, truncate_targets
from rope_adapter.search.selection import choose, pareto_front, search_set_warning
from rope_adapter.search.settings import redact_url

POSTGRES_URL = os.environ.get("ROPE_ADAPTER_TEST_POSTGRES_URL")


# ---------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def finished(tmp_path_factory, model_dir):
    """One in-process search with a tight bound, a perplexity guard and held-out accuracy."""
    out = tmp_path_factory.mktemp("finished")
    settings = small(
        out,
        model_dir,
        trials=14,
        s_max=1.3,
        margin=0.5,
        max_ppl_increase=0.02,
        ppl_window_chars=120,
        ppl_windows=2,
        holdout_accuracy=True,
    )
    result = run_search(settings)
    return settings, result, load_trials(settings)


# ---------------------------------------------------------------------------------------------------- pure parts


def test_objective_values():
    by_position = {0: -1.0, 5: -3.0, 9: -2.0}
    assert ObjectiveSpec().values(by_position) == (-2.0, -3.0)
    spec = ObjectiveSpec(kind="weighted", position_weights=(1.0, 2.0, 1.0), worst_weight=0.25)
    weighted = (1 * -1.0 + 2 * -3.0 + 1 * -2.0) / 4
    assert spec.values(by_position) == pytest.approx((0.75 * weighted + 0.25 * -3.0,))
    assert spec.directions == ["maximize"]
    assert ObjectiveSpec().directions == ["maximize", "maximize"]
    assert position_means([0, 1, 0, 1], [1.0, 2.0, 3.0, 4.0]) == {0: 2.0, 1: 3.0}
    with pytest.raises(ValueError, match="score"):
        ObjectiveSpec(score="bleu")
    with pytest.raises(ValueError, match="position weights"):
        ObjectiveSpec(kind="weighted", position_weights=(1.0, 1.0)).values(by_position)


def test_factor_constraints_values_and_names():
    space = BezierSpace(degree=3, s_min=1.0, s_max=1.5)
    fc = FactorConstraints(space, 10, (LayerBound.parse("0-2:1.0:1.1"),), max_step=0.2)
    assert len(fc.names()) == 5
    factors, values = fc.evaluate(np.array([[0, 1.0], [1 / 3, 1.0], [2 / 3, 1.0], [1, 1.0]]))
    assert np.allclose(factors, 1.0) and all(v <= 0 for v in values)
    # a curve that rises to 1.8 breaks s_max, and the steps are 0.2+; the first layers exceed 1.1
    _, values = fc.evaluate(np.array([[0, 1.3], [1 / 3, 1.3], [2 / 3, 1.8], [1, 1.8]]))
    assert values[1] == pytest.approx(0.3) and values[3] > 0
    _, values = fc.evaluate(np.array([[0, 1.0], [1 / 3, 1.0], [2 / 3, 1.0], [1, 3.0]]))
    assert values[4] > 0  # the last step (2/9 of the way to 3.0 and beyond) exceeds 0.2
    assert perplexity_constraint(math.log(10.5), math.log(10.0), 0.05) == pytest.approx(0.0, abs=1e-12)
    assert perplexity_constraint(math.log(11.0), math.log(10.0), 0.05) > 0
    free = FactorConstraints(BezierSpace(degree=3, x_mode="free"), 10)
    factors, values = free.evaluate(np.array([[0, 1.0], [0.7, 1.0], [0.2, 1.0], [1, 1.0]]))
    assert factors is None and values[2] > 0  # unordered xs: no curve, infeasible


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(layer_bounds=(LayerBound(0, 2, 1.6, 1.7),)), "no factor for layer 0"),
        (dict(layer_bounds=(LayerBound(3, 12, 1.0, 1.1),)), "model has 10 layers"),
        (dict(layer_bounds=(LayerBound(0, 4, 1.0, 1.0), LayerBound(5, 9, 1.5, 1.5)), max_step=0.1), "force a step"),
        (dict(max_step=-1.0), "max_step"),
    ],
)
def test_empty_spaces_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FactorConstraints(BezierSpace(s_min=1.0, s_max=1.5), 10, **kwargs).check_feasible_space()


def test_layer_bound_parsing():
    assert LayerBound.parse("25-29:1.0:1.0") == LayerBound(25, 29, 1.0, 1.0)
    assert LayerBound.parse(" 3 :0.9: 1.2") == LayerBound(3, 3, 0.9, 1.2)
    for bad in ("1-2", "2-1:1:1", "0-1:1.2:1.1", "a-b:1:2"):
        with pytest.raises(ValueError):
            LayerBound.parse(bad)


def test_truncated_targets_give_the_same_first_k_logprobs(tokenizer):
    model = tiny_model("llama", num_layers=2)
    one_form = KVRetrievalTask(num_records=2, num_pairs=3, positions=[0, 2], seed=1, alt_target_prefixes=())
    task = prepare(one_form.samples(), tokenizer)  # with two forms the more probable one may differ after k tokens
    full = token_logprobs(model, task)
    cut = token_logprobs(model, truncate_targets(task, 4))
    assert all(len(v) == 4 for v in cut.values)
    np.testing.assert_allclose(cut.mean(4), full.mean(4), atol=1e-5, rtol=0)


def test_differences_by_position_and_record_statistics():
    positions = np.array([0, 1, 0, 1, 0, 1])
    ids = ["a", "a", "b", "b", "c", "c"]
    base = np.array([-1.0, -2.0, -1.0, -2.0, -1.0, -2.0])
    found = base + np.array([0.1, 0.3, 0.2, 0.3, 0.3, 0.3])
    d = differences_by_position_and_record(found, base, positions, ids)
    assert d["by_position"]["0"]["diff"] == pytest.approx(0.2)
    assert d["by_position"]["0"]["se"] == pytest.approx(np.std([0.1, 0.2, 0.3], ddof=1) / math.sqrt(3))
    assert d["by_position"]["1"]["se"] == pytest.approx(0.0)
    assert d["mean"]["diff"] == pytest.approx(0.25) and d["mean"]["n_records"] == 3
    assert d["mean"]["bootstrap_low"] <= 0.25 <= d["mean"]["bootstrap_high"]  # records' diffs 0.2, 0.25, 0.3
    assert d["mean"]["bootstrap_low"] >= 0.2 - 1e-9 and d["mean"]["bootstrap_high"] <= 0.3 + 1e-9
    assert d["worst"]["diff"] == pytest.approx(0.3)  # worst position (1): -2.0 -> -1.7
    assert d["worst"]["se_bootstrap"] is not None


def test_holdout_verdict_flags_a_first_k_gain_that_hurts_the_whole_answer():
    def diff(value, se):
        return {"mean": {"diff": value, "se": se}}

    holdout = {
        "k": 4,
        "differences": {
            "found-base": {**diff(0.08, 0.03), "whole_answer": diff(-0.49, 0.03)},
            "found-best_uniform": diff(0.07, 0.04),
        },
    }
    verdict = holdout_verdict(holdout)
    assert verdict.startswith("On the held-out records the found factors beat the unscaled model")
    assert "Warning: over the whole answer (every token, not the first 4) they are worse" in verdict
    holdout["differences"]["found-base"]["whole_answer"] = diff(0.01, 0.02)
    assert "Warning" not in holdout_verdict(holdout) and "Over the whole answer" in holdout_verdict(holdout)
    holdout.update(k=None)  # the default score: the whole answer already; the warning must not speak of a first k
    holdout["differences"]["found-base"]["whole_answer"] = diff(-0.03, 0.005)
    verdict = holdout_verdict(holdout)
    assert "Warning: the whole answer's log-prob is lower than the unscaled model's" in verdict
    assert "None" not in verdict and "first" not in verdict


def test_pareto_front_and_choice():
    def rec(number, mean, worst, baseline=None, uniform=None, feasible=True):
        return {
            "number": number, "state": "COMPLETE", "evaluated": feasible, "feasible": feasible, "baseline": baseline,
            "uniform": uniform, "objectives": {"mean": mean, "worst": worst},
        }  # fmt: skip

    records = [
        rec(0, -1.0, -2.0, "base", 1.0),
        rec(1, -1.1, -1.9, "uniform", 1.05),
        rec(2, -0.9, -2.5),
        rec(3, -1.2, -1.5),
        rec(4, -1.3, -2.6),
        rec(5, 0.0, 0.0, feasible=False),
    ]
    spec = ObjectiveSpec()
    assert pareto_front(records, spec) == [0, 1, 2, 3]
    found, uniform, base = choose(records, spec, "mean")
    assert (found["number"], uniform["number"], base["number"]) == (2, 1, 0)
    assert choose(records, spec, "worst")[0]["number"] == 3
    assert choose(records, spec, "balanced")[0]["number"] == 3

    # the found curve beats both baselines on its rule: no warning; on "worst" it beats them too (-1.5)
    settings = {"s_min": 1.0, "s_max": 2.0}
    baselines = [("the unscaled model", base), ("the best uniform factor 1.05", uniform)]
    assert search_set_warning(found, baselines, spec, "mean", settings) is None
    # a found curve that the unscaled model beats is flagged, naming the rule, the baseline and the way out
    worse = rec(6, -1.05, -2.7)
    warning = search_set_warning(worse, baselines, spec, "mean", settings)
    assert "does not beat the unscaled model (-1.000)" in warning and "uniform factor 1.05" not in warning
    assert "mean -1.050" in warning and "--s-min 1.0 --s-max 2.0" in warning and "resumes" in warning
    assert "the best uniform factor 1.05 (-1.900)" in search_set_warning(worse, baselines, spec, "worst", settings)
    assert search_set_warning(base, baselines, spec, "mean", settings) is None  # a baseline chosen: said elsewhere


# ---------------------------------------------------------------------------------------------------- studies


def test_baselines_are_the_first_trials(finished):
    settings, result, trials = finished
    by_number = {t.number: t for t in trials}
    labels = [(by_number[i].user_attrs.get("baseline"), by_number[i].user_attrs.get("uniform")) for i in range(4)]
    # the unscaled model, then the default uniform factors inside [s_min, s_max] = [1.0, 1.3]
    assert labels == [("base", 1.0), ("uniform", 1.05), ("uniform", 1.1), ("uniform", 1.25)]
    uniforms = [t.user_attrs["uniform"] for t in trials if t.user_attrs.get("baseline") == "uniform"]
    assert uniforms == [1.05, 1.1, 1.25]
    for t in trials:
        if t.user_attrs.get("baseline") and t.state.name == "COMPLETE":
            factors = t.user_attrs["lrs"]["factors"]
            assert np.allclose(factors, t.user_attrs["uniform"], atol=1e-12)  # a constant curve is exact
    report = result.report
    assert report["baselines"]["base"]["trial"] == 0
    assert report["baselines"]["best_uniform"]["uniform"] in uniforms


def test_constraints_mark_infeasible_trials(finished):
    settings, result, trials = finished
    report = result.report
    names = report["study"]["constraint_names"]
    assert names[:2] == ["factor >= s_min", "factor <= s_max"] and names[-1].startswith("perplexity")
    done = complete(trials)
    assert len(done) >= settings.study.trials
    out_of_bounds = 0
    for t in done:
        info = t.user_attrs["lrs"]
        assert set(t.constraints) == set(names)  # what the objective recorded with Trial.set_constraint
        stored = [t.constraints[name] for name in names]
        assert stored == info["constraints"]
        factors = np.array(info["factors"])
        outside = factors.min() < settings.space.s_min - 1e-12 or factors.max() > settings.space.s_max + 1e-12
        out_of_bounds += outside
        assert (stored[0] > 0 or stored[1] > 0) == outside
        feasible = all(c <= 0 for c in stored)
        assert info["evaluated"] == feasible  # infeasible trials are not scored ...
        if not feasible:
            assert all(v == -math.inf for v in t.values)  # ... and their values say so
        if info.get("perplexity"):
            ratio = info["perplexity"]["ppl"] / info["perplexity"]["base_ppl"]
            assert (stored[-1] > 0) == (ratio - 1 > settings.space.max_ppl_increase)
    assert out_of_bounds > 0  # the margin makes the sampler propose curves outside [s_min, s_max]
    feasible_numbers = {r["number"] for r in report["trials"] if r["feasible"] and r["evaluated"]}
    assert set(report["pareto_front"]) <= feasible_numbers
    assert report["chosen"]["number"] in feasible_numbers


def test_outputs_of_a_finished_search(finished):
    settings, result, _ = finished
    out = Path(settings.out)
    for name in ("search_report.json", "search_report.md", "pareto.png", "factors.png", "positions.png"):
        assert (out / name).is_file(), name
    report = json.loads((out / "search_report.json").read_text())
    holdout = report["holdout"]
    assert set(holdout["configs"]) == {"base", "best_uniform", "found"}
    assert set(holdout["differences"]) == {"found-base", "found-best_uniform", "best_uniform-base"}
    assert holdout["samples"] == settings.holdout_records * settings.task.num_positions
    for d in holdout["differences"].values():
        assert set(d["by_position"]) == {"0", "1", "2"} and "se" in d["mean"] and "accuracy" in d
        if settings.objective.k is not None:  # the first-k score is checked against the whole answer too
            assert set(d["whole_answer"]["by_position"]) == {"0", "1", "2"}
    assert "Over the whole answer" in holdout["verdict"] or "Warning: over the whole answer" in holdout["verdict"]
    assert "accuracy_by_position" in holdout["configs"]["found"] and "perplexity" in holdout["configs"]["base"]
    assert holdout["configs"]["base"]["factors"] == [1.0] * NUM_LAYERS
    assert report["timing"]["seconds_per_scored_sample"] > 0 and report["timing"]["trials_per_minute_this_run"] > 0
    assert len(report["trials"]) == len(load_trials(settings))
    assert all("factors" in t and "constraints" in t for t in report["trials"])


def test_an_existing_study_resumes_and_keeps_its_trials(finished, tmp_path):
    settings, _, before = finished
    more = settings.updated(trials=settings.study.trials + 3)
    run_search(more)
    after = load_trials(more)
    old = {t.number: t.values for t in complete(before)}
    new = {t.number: t.values for t in complete(after)}
    assert all(new[n] == v for n, v in old.items())
    assert len(new) >= settings.study.trials + 3
    assert min(set(new) - set(old)) > max(old)
    # trials=0 only rebuilds the outputs from the study
    again = run_search(settings.updated(trials=0))
    assert again.report["study"]["complete"] == len(new)


def test_weighted_single_objective(tmp_path, model_dir):
    result = run_search(small(tmp_path / "w", model_dir, objective="weighted", trials=6, holdout_records=1))
    assert result.report["study"]["objectives"] == ["fitness"]
    assert result.report["chosen"]["select"] == "fitness"
    assert all(len(t["values"]) == 1 for t in result.report["trials"] if t["values"])


def test_resume_after_sigkill(tmp_path, model_dir):
    settings = small(tmp_path / "kill", model_dir, trials=400, heartbeat=1)
    process = start_cli(settings)
    try:
        while len(complete(load_trials(settings))) < 3:
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    before = {t.number: (t.values, t.params) for t in complete(load_trials(settings))}
    assert len(before) >= 3

    target = len(before) + 4
    resumed = settings.updated(trials=target)
    restart = start_cli(resumed)
    stdout, stderr = restart.communicate()
    assert restart.returncode == 0, stderr
    trials = load_trials(resumed)
    after = {t.number: (t.values, t.params) for t in complete(trials)}
    assert all(after[n] == before[n] for n in before)  # no finished trial lost or changed
    assert len(after) >= target
    assert min(set(after) - set(before)) > max(before)  # numbering continues
    # the killed trial (if one was running) went stale and its parameters were enqueued again
    for t in trials:
        assert t.state.name in ("COMPLETE", "FAIL", "WAITING", "RUNNING")
    assert "chosen" in stdout


def test_two_workers_share_one_sqlite_study(tmp_path, model_dir):
    two_workers(small(tmp_path / "two", model_dir, workers=2, trials=16))


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="ROPE_ADAPTER_TEST_POSTGRES_URL is not set (source .ci/postgres.sh)")
def test_two_workers_share_one_postgres_study(tmp_path, model_dir):
    import optuna

    name = f"test-{uuid.uuid4().hex[:12]}"
    settings = small(tmp_path / "pg", model_dir, workers=2, trials=16, storage=POSTGRES_URL, study=name)
    try:
        two_workers(settings)
        report = json.loads((tmp_path / "pg" / "search_report.json").read_text())
        password = redact_url(POSTGRES_URL) != POSTGRES_URL
        if password:
            from sqlalchemy.engine import make_url

            secret = make_url(POSTGRES_URL).password
            assert secret not in json.dumps(report)
            assert secret not in (tmp_path / "pg" / "adapter" / "adapter_config.json").read_text()
    finally:
        optuna.delete_study(study_name=name, storage=POSTGRES_URL)


def test_new_trials_sample_end_ys_within_the_bounds(finished):
    settings, _, trials = finished
    space = settings.space.bezier()
    for t in complete(trials):
        for name in ("y0", f"y{space.degree}"):
            d = t.distributions[name]
            assert (d.low, d.high) == (settings.space.s_min, settings.space.s_max)
        inner = t.distributions["y1"]
        assert inner.low < settings.space.s_min and inner.high > settings.space.s_max


def test_accuracy_score_and_no_holdout(tmp_path, model_dir):
    result = run_search(small(tmp_path / "acc", model_dir, score="accuracy", trials=5, holdout_records=0))
    scored = [t for t in result.report["trials"] if t["evaluated"]]
    assert scored and all(0.0 <= v <= 1.0 for t in scored for v in t["values"])
    assert result.report["holdout"] is None and result.adapter_dir is not None
    assert (tmp_path / "acc" / "pareto.png").is_file() and not (tmp_path / "acc" / "positions.png").exists()


def test_repeated_proposals_are_pruned_without_scoring(tmp_path, model_dir):
    import optuna

    settings = small(tmp_path / "rep", model_dir, trials=7, holdout_records=1)
    run_search(settings)
    storage = optuna.storages.RDBStorage(settings.storage_url())
    study = optuna.load_study(study_name=settings.study.name, storage=storage)
    earlier = next(t for t in study.get_trials() if t.number == 1)
    study.enqueue_trial(earlier.params)  # what NSGA-II does when two identical parents cross without mutation
    result = run_search(settings.updated(trials=8))
    trials = {t.number: t for t in load_trials(settings)}
    pruned = [t for t in trials.values() if t.state.name == "PRUNED"]
    assert len(pruned) == 1 and pruned[0].params == earlier.params
    assert pruned[0].user_attrs["lrs"]["duplicate_of"] == 1 and "sample_scores" not in pruned[0].user_attrs["lrs"]
    assert len(complete(trials.values())) == 8  # the pruned repeat did not count towards --trials
    assert result.report["study"]["repeats_pruned"] == 1


def test_found_adapters_name_their_base_portably(tmp_path, monkeypatch):
    from rope_adapter.search.worker import recorded_base

    assert recorded_base("smollm2-135m-instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert recorded_base("qwen2.5-coder-0.5b-instruct") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    (tmp_path / "models" / "mine").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert recorded_base("models/mine") == str(tmp_path / "models" / "mine")  # absolute: works from anywhere
    assert recorded_base("org/some-model") == "org/some-model"
