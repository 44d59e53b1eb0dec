"""Racing: staged scoring of search trials, the paired stop rule, how a stopped trial is recorded, the budget."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from testkit.searches import load_trials, small

from rope_adapter.search import SearchSettings, run_search
from rope_adapter.search.objective import Evaluator
from rope_adapter.search.racing import (
    MIN_STAGE_RECORDS,
    estimated_by_position,
    paired_check,
    record_scores,
    stage_ends,
)
from rope_adapter.search.settings import SearchError

# ---------------------------------------------------------------------------------------------------- pure parts


def test_stage_ends():
    assert stage_ends(40, (0.2, 0.5)) == [8, 20, 40]
    assert stage_ends(40, ()) == [40]
    assert stage_ends(10, (0.2, 0.5)) == [5, 10]  # 2 records is below the minimum: dropped
    assert stage_ends(3, (0.5,)) == [3]
    assert stage_ends(20, (0.5, 0.5)) == [10, 20]  # a repeated count is dropped
    assert min(stage_ends(100, (0.01, 0.5))) >= MIN_STAGE_RECORDS
    for bad in ((0.0,), (1.0,), (-0.2,), (1.5,)):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            stage_ends(10, bad)


def test_record_scores_average_each_records_samples():
    scores = [1.0, 0.0, 1.0, 0.5, 0.5]
    np.testing.assert_allclose(record_scores(scores, [0, 0, 1, 1, 2, 2], 3), [0.5, 0.75, 0.5])
    partial = record_scores(scores[:3], [0, 0, 1, 1, 2, 2], 3)
    assert partial[0] == 0.5 and partial[1] == 1.0 and math.isnan(partial[2])


def test_paired_check_stops_only_when_clearly_worse():
    reference = np.array([0.6, 0.4, 0.8, 0.2, 0.6, 0.4, 0.8, 0.2])
    worse = reference - np.array([0.3, 0.25, 0.35, 0.3, 0.28, 0.32, 0.3, 0.27])
    check = paired_check(worse, reference)
    assert check.stop and check.diff < 0 and check.se > 0 and check.records == 8
    noisy = reference + np.array([0.5, -0.6, 0.4, -0.5, 0.3, -0.2, 0.1, -0.2])  # lower mean, but noisy
    assert not paired_check(noisy, reference).stop
    assert not paired_check(reference + 0.1, reference).stop  # better: never stopped
    assert not paired_check(reference[:1] - 1, reference).stop  # one record: no test
    # a larger z stops less
    borderline = reference - np.array([0.1, 0.0, 0.2, 0.05, 0.15, 0.0, 0.1, 0.05])
    assert paired_check(borderline, reference, z=1.0).stop and not paired_check(borderline, reference, z=5.0).stop


def test_estimate_shifts_partial_means_by_the_reference():
    estimate = estimated_by_position({0: 0.2, 5: 0.1}, {0: 0.5, 5: 0.3}, {0: 0.6, 5: 0.25})
    assert estimate == pytest.approx({0: 0.3, 5: 0.05})


# ------------------------------------------------------------------------------------------------ the study


@pytest.fixture(scope="module")
def raced(tmp_path_factory, model_dir):
    """A search on 8 records raced in two stages (4 + 4). A random tiny model cannot tell factor sets apart, so
    the real scores get a penalty for factors far from 1 (the forward passes and the staging stay real): the
    curves NSGA-II proposes far from 1 are then clearly worse than the unscaled model after 4 records."""
    out = tmp_path_factory.mktemp("raced")
    settings = small(out, model_dir, search_records=8, trials=14, race=(0.5,), s_max=2.0)
    real = Evaluator.score

    def penalised(self, factors, task, **kwargs):
        scored = real(self, factors, task, **kwargs)
        penalty = abs(float(np.mean(factors)) - 1.0)
        scored.per_sample = scored.per_sample - penalty
        scored.by_position = {p: v - penalty for p, v in scored.by_position.items()}
        return scored

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Evaluator, "score", penalised)
        result = run_search(settings)
    return settings, result, load_trials(settings)


def test_stopped_trials_are_complete_estimates_never_chosen(raced):
    settings, result, trials = raced
    infos = {t.number: t.user_attrs["lrs"] for t in trials if t.state.name == "COMPLETE"}
    scored = {n: i for n, i in infos.items() if i.get("evaluated") and "duplicate_of" not in i}
    stopped = {n: i for n, i in scored.items() if i.get("raced_out")}
    assert stopped, "curves far from 1 must be clearly worse than the unscaled model after 4 records"
    by_number = {t.number: t for t in trials}
    for number, info in stopped.items():
        assert info["records_scored"] == 4 and len(info["sample_scores"]) == 4 * 3
        assert by_number[number].state == optuna.trial.TrialState.COMPLETE  # seen by NSGA-II, not pruned
        check = info["race"]["checks"][-1]
        assert check["stop"] and check["diff"] + settings.study.race_z * check["se"] < 0
        reference = infos[info["race"]["reference"]]
        assert not reference.get("raced_out") and reference["records_scored"] == 8
        # the recorded values are the partial means shifted by the reference's full - partial means
        ref_partial = np.array(reference["sample_scores"][:12]).reshape(4, 3).mean(axis=0)
        mine = np.array(info["sample_scores"]).reshape(4, 3).mean(axis=0)
        full = np.array([reference["by_position"][p] for p in sorted(reference["by_position"], key=int)])
        np.testing.assert_allclose(
            [info["by_position"][p] for p in sorted(info["by_position"], key=int)], mine + full - ref_partial, atol=1e-5
        )
        assert by_number[number].values[0] == pytest.approx(info["objectives"]["mean"])
    for info in scored.values():
        if info.get("raced_out"):
            continue
        assert info["records_scored"] == 8 and len(info["sample_scores"]) == 8 * 3
    base = [t for t in trials if t.user_attrs.get("baseline") == "base"]
    assert [t.user_attrs["lrs"]["records_scored"] for t in base] == [8]  # the unscaled model: never raced
    for t in trials:  # a uniform factor races only against a baseline
        if t.user_attrs.get("baseline") == "uniform" and t.user_attrs["lrs"].get("raced_out"):
            reference = infos[t.user_attrs["lrs"]["race"]["reference"]]
            assert by_number[t.user_attrs["lrs"]["race"]["reference"]].user_attrs.get("baseline") is not None
            assert reference["records_scored"] == 8
    chosen = result.report["chosen"]
    assert chosen is not None and chosen["number"] not in stopped
    assert result.report["baselines"]["best_uniform"] is not None  # always one for the held-out comparison
    racing = result.report["study"]["racing"]
    assert racing["raced_out"] == len(stopped) and racing["stage_ends"] == [4, 8]
    used = sum(i["records_scored"] for i in scored.values())
    assert racing["records_scored"] == used and racing["records_without_racing"] == 8 * len(scored)
    assert racing["saved_fraction"] == pytest.approx(1 - used / (8 * len(scored)))


def test_record_budget_stops_the_search(tmp_path, model_dir):
    settings = small(tmp_path, model_dir, trials=50, max_records=12)
    result = run_search(settings)
    trials = [t for t in load_trials(settings) if t.state.name == "COMPLETE"]
    used = sum(t.user_attrs["lrs"].get("records_scored", 0) for t in trials)
    assert 12 <= used < 12 + 3  # stops after the trial that reaches the budget (3 records a trial)
    assert result.report["study"]["racing"]["records_scored"] == used


def test_bad_racing_settings_fail_before_any_work(tmp_path):
    for kwargs, match in (
        ({"race": (1.2,)}, "race"),
        ({"race_z": 0.0}, "race_z"),
        ({"race_z": float("nan")}, "race_z"),
        ({"max_records": 0}, "max_records"),
    ):
        with pytest.raises(SearchError, match=match):
            SearchSettings.flat(out=str(tmp_path / "never"), **kwargs)
    assert not (tmp_path / "never").exists()


def test_holdout_scores_a_found_baseline_once(tmp_path, model_dir, monkeypatch):
    """When the chosen factors are a baseline's (only baselines ran), the held-out step scores them once."""
    calls = []
    real = Evaluator.score

    def counting(self, factors, task, **kwargs):
        if kwargs.get("keep_logprobs"):  # the held-out step keeps the per-token log-probs
            calls.append(tuple(np.round(np.asarray(factors, float), 6)))
        return real(self, factors, task, **kwargs)

    monkeypatch.setattr(Evaluator, "score", counting)
    result = run_search(small(tmp_path, model_dir, trials=1, uniform=(1.25,), s_min=1.1, s_max=1.5))
    holdout = result.report["holdout"]
    found, uniform = holdout["configs"]["found"], holdout["configs"]["best_uniform"]
    assert found["factors"] == uniform["factors"] and found["by_position"] == uniform["by_position"]
    assert len(calls) == len(set(calls)) == 2  # base and the uniform factor, each once


def test_the_budget_counts_a_raced_out_trial_by_its_records():
    """A trial stopped after 8 of 40 records says little about a full pass: the held-out estimate scales it."""
    import time

    from rope_adapter.search.storage import TRIAL_ATTR
    from rope_adapter.search.trial import _BudgetStop

    class Trial:
        def __init__(self, seconds, records):
            self.user_attrs = {TRIAL_ATTR: {"evaluated": True, "seconds": seconds, "records_scored": records}}

    class Study:
        stopped = False

        def stop(self):
            self.stopped = True

    # 40 search records, 200 samples; held out: 200 samples x 3 configurations = 3 full passes
    stop = _BudgetStop(time.time() + 400, holdout_samples=200, search_samples=200, configs=3, search_records=40)
    study = Study()
    stop(study, Trial(20.0, 8))  # a raced-out trial: 20 s for 8 records = 100 s for a full pass
    assert stop.costs == [pytest.approx(100.0)]
    assert study.stopped  # 100 s (next trial) + 1.15 x 3 x 100 s (held out) = 445 s > 400 s left
    roomy = _BudgetStop(time.time() + 500, holdout_samples=200, search_samples=200, configs=3, search_records=8)
    roomy(Study(), Trial(20.0, 8))
    assert roomy.costs == [pytest.approx(20.0)]
