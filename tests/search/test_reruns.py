"""An enqueued trial (a baseline, a retry) that an interrupted run left failed is run again when the study resumes."""

from __future__ import annotations

import optuna
import pytest
from testkit.searches import small

from rope_adapter.search import storage as storage_mod
from rope_adapter.search.fingerprint import study_fingerprint
from rope_adapter.search.storage_url import open_storage

FAIL = optuna.trial.TrialState.FAIL


@pytest.fixture
def made(tmp_path, tiny_llama_dir):
    settings = small(tmp_path, tiny_llama_dir, storage=f"sqlite:///{tmp_path}/study.db", sampler="tpe")
    storage = open_storage(settings.study.storage)
    fingerprint = study_fingerprint(settings, "float32")
    space = settings.space.bezier()

    def resume() -> optuna.Study:
        created = storage_mod.create_or_load_study(storage, "lrs", ["maximize"], fingerprint, space, [1.1, 1.2])
        return optuna.load_study(study_name="lrs", storage=storage), created

    return resume


def _fail_next(study: optuna.Study) -> optuna.trial.FrozenTrial:
    trial = study.ask()
    study.tell(trial, state=FAIL)
    return study.trials[trial.number]


def _waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.trials if t.state == optuna.trial.TrialState.WAITING]


def test_an_interrupted_baseline_is_enqueued_again_once_per_failure(made):
    study, created = made()
    assert created and len(_waiting(study)) == 3  # base, 1.1, 1.2
    failed = _fail_next(study)  # the base, as Ctrl-C leaves it
    assert failed.user_attrs["uniform"] == 1.0
    study, created = made()
    assert not created
    again = [t for t in _waiting(study) if t.user_attrs.get(storage_mod.RERUN_ATTR) == failed.number]
    assert len(again) == 1
    assert (
        again[0].user_attrs[storage_mod.BASELINE_ATTR] == "base"
        and again[0].system_attrs["fixed_params"] == (failed.system_attrs["fixed_params"])
    )
    study, _ = made()  # resuming again enqueues nothing more: the failure is already being run again
    assert len(_waiting(study)) == 3


def test_a_chain_of_failures_is_run_again_at_most_max_reruns_times(made):
    study, _ = made()
    for _ in range(3):
        _fail_next(study)  # the two others run first: base, 1.1, 1.2 fail
    for _ in range(storage_mod.MAX_RERUNS):
        study, _ = made()
        assert len(_waiting(study)) == 3
        for _ in range(3):
            _fail_next(study)
    study, _ = made()
    assert _waiting(study) == []
    assert sum(t.state == FAIL for t in study.trials) == 3 * (1 + storage_mod.MAX_RERUNS)


def test_searched_trials_and_parameters_run_elsewhere_are_not_repeated(made):
    study, _ = made()
    base = _fail_next(study)  # interrupted; then, before any resume, someone enqueues the same curve by hand
    study.enqueue_trial(dict(base.system_attrs["fixed_params"]), user_attrs={"baseline": "base", "uniform": 1.0})
    study.tell(study.ask(), 0.5)  # the two other baselines
    study.tell(study.ask(), 0.5)
    study.tell(study.ask(), 0.5)  # the one enqueued by hand: finished
    searched = _fail_next(study)
    assert "fixed_params" not in searched.system_attrs
    assert storage_mod.rerun_interrupted(study) == []  # the base is scored; a searched trial is proposed afresh
    # a baseline that Optuna's heartbeat already retries (a WAITING trial with its parameters) is not added again
    study.enqueue_trial(
        {k: 1.3 for k in base.system_attrs["fixed_params"]}, user_attrs={"baseline": "uniform", "uniform": 1.3}
    )
    failed = _fail_next(study)
    assert failed.user_attrs["uniform"] == 1.3
    study.add_trial(
        optuna.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=failed.params,
            distributions=failed.distributions,
            user_attrs=failed.user_attrs,
            system_attrs={**failed.system_attrs, "failed_trial": failed.number, "retry_history": [failed.number]},
        )
    )
    assert storage_mod.rerun_interrupted(study) == []
    retry = _fail_next(study)  # the retry fails too (interrupted): now nothing runs 1.3 again, so it is enqueued
    assert retry.user_attrs["uniform"] == 1.3
    assert len(storage_mod.rerun_interrupted(study)) == 1
