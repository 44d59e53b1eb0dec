"""The sampler setting (nsga2, gp, tpe): searches run, resume and report their sampler; what each sampler reads of
infeasible and raced-out trials; copying a study's trials into a study with another sampler.

Tiny random models and a byte tokenizer, as in test_study.py.
"""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest
from testkit.searches import load_trials, small
from testkit.searches import two_workers as _two_workers

from rope_adapter.search import SearchError, copy_trials, run_search
from rope_adapter.search import storage as storage_mod
from rope_adapter.search.fingerprint import study_fingerprint
from rope_adapter.search.samplers import DEFAULT_SAMPLER, SAMPLERS, STARTUP_TRIALS, build_sampler, describe_sampler
from rope_adapter.search.storage import TRIAL_ATTR
from rope_adapter.search.storage_url import open_storage

NUM_LAYERS = 4


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir) -> Path:
    return tiny_llama_dir


@pytest.fixture(scope="module")
def searches(tmp_path_factory, model_dir):
    """One search per sampler, past the startup trials (so GP and TPE propose from a fitted model)."""
    out = {}
    for name in SAMPLERS:
        folder = tmp_path_factory.mktemp(f"search-{name}")
        settings = small(folder, model_dir, sampler=name, trials=STARTUP_TRIALS + 3, degree=2, race=())
        out[name] = (settings, run_search(settings), load_trials(settings))
    return out


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_each_sampler_runs_and_reports_itself(searches, name):
    settings, result, trials = searches[name]
    assert len([t for t in trials if t.state.name == "COMPLETE"]) == STARTUP_TRIALS + 3
    report = json.loads((Path(settings.out) / "search_report.json").read_text())
    assert report["study"]["sampler"] == describe_sampler(name, settings.study.population)
    assert report["settings"]["sampler"] == name
    config = json.loads((Path(settings.out) / "adapter" / "adapter_config.json").read_text())
    assert config["provenance"]["method"] == f"bezier-{name}"
    assert config["provenance"]["study"]["sampler"] == report["study"]["sampler"]
    assert describe_sampler(name, settings.study.population) in (Path(settings.out) / "search_report.md").read_text()
    study = optuna.load_study(study_name=settings.study.name, storage=settings.storage_url())
    assert study.user_attrs[storage_mod.SETTINGS_ATTR]["sampler"] == name
    # the proposals after the baselines are new points, not the baselines again
    searched = [t for t in trials if t.user_attrs.get("baseline") is None and t.state.name == "COMPLETE"]
    assert len({tuple(sorted(t.params.items())) for t in searched}) == len(searched)


def test_the_gp_sampler_models_the_trials_after_startup(tmp_path, model_dir, monkeypatch):
    """Before ``STARTUP_TRIALS`` GPSampler samples at random; from then on every searched trial runs the point its
    Gaussian-process model proposed (``sample_relative`` returns the whole point, and that point is what is scored),
    inside the sampler ranges."""
    proposals: dict[int, dict] = {}
    original = optuna.samplers.GPSampler.sample_relative

    def spy(self, study, trial, search_space):
        proposals[trial.number] = out = original(self, study, trial, search_space)
        return out

    monkeypatch.setattr(optuna.samplers.GPSampler, "sample_relative", spy)
    settings = small(tmp_path, model_dir, sampler="gp", trials=STARTUP_TRIALS + 2, degree=2, race=())
    run_search(settings)
    trials = load_trials(settings)
    searched = [t for t in trials if t.user_attrs.get("baseline") is None]
    early = [t for t in searched if t.number < STARTUP_TRIALS]
    late = [t for t in searched if t.number >= STARTUP_TRIALS]
    assert early and len(late) == 2
    assert all(not proposals.get(t.number) for t in early)  # random startup: the model proposes nothing
    for t in late:
        assert proposals[t.number] and set(proposals[t.number]) == set(t.params)
        assert all(t.params[n] == pytest.approx(v) for n, v in proposals[t.number].items())
        for name, value in t.params.items():
            d = t.distributions[name]
            assert d.low <= value <= d.high


def test_resuming_with_another_sampler_is_refused_with_the_way_out(searches, model_dir):
    settings, _, _ = searches["nsga2"]
    other = small(Path(settings.out), model_dir, sampler="gp", trials=settings.study.trials + 1, degree=2, race=())
    with pytest.raises(SearchError, match=r"sampler: 'nsga2' in the study, 'gp' now.*copy_trials"):
        run_search(other)


def test_resuming_without_a_sampler_keeps_the_study_s_own(searches, model_dir, tmp_path):
    """The default sampler is "the study's own" for a resumed study: a study made with NSGA-II (the default before
    GP) resumes with the command that made it, and its report still names NSGA-II."""
    settings, _, _ = searches["nsga2"]
    shutil.copytree(settings.out, tmp_path / "copy")  # the fixture's study stays as it is for the other tests
    again = small(tmp_path / "copy", model_dir, trials=settings.study.trials + 1, degree=2, race=())
    assert again.study.sampler is None
    result = run_search(again)
    assert result.report["settings"]["sampler"] == "nsga2"
    assert result.report["study"]["sampler"] == describe_sampler("nsga2", settings.study.population)
    assert len([t for t in load_trials(again) if t.state.name == "COMPLETE"]) == settings.study.trials + 1


def test_a_new_study_gets_the_default_sampler(tmp_path, model_dir):
    settings = small(tmp_path, model_dir, storage=f"sqlite:///{tmp_path}/study.db")
    assert settings.study.sampler is None
    storage = open_storage(settings.study.storage)
    assert storage_mod.resolve_sampler(settings, storage).study.sampler == DEFAULT_SAMPLER == "gp"
    with pytest.raises(ValueError, match="resolve_sampler"):
        study_fingerprint(settings, "float32")
    named = small(tmp_path, model_dir, storage=settings.study.storage, sampler="tpe")
    assert storage_mod.resolve_sampler(named, storage) is named


def test_a_study_made_before_the_sampler_setting_resumes_as_nsga2(tmp_path, model_dir):
    settings = small(tmp_path, model_dir, storage=f"sqlite:///{tmp_path}/study.db", sampler="nsga2")
    old = study_fingerprint(settings, "float32")
    del old["sampler"]
    storage = open_storage(settings.study.storage)
    storage_mod.create_or_load_study(storage, "lrs", ["maximize"], old, settings.space.bezier(), [])
    assert storage_mod.check_existing_study(storage, "lrs", study_fingerprint(settings, "float32"))
    default = small(tmp_path, model_dir, storage=settings.study.storage, study="lrs")
    assert storage_mod.resolve_sampler(default, storage).study.sampler == "nsga2"
    gp = small(tmp_path, model_dir, storage=settings.study.storage, sampler="gp")
    with pytest.raises(SearchError, match=r"sampler: 'nsga2' in the study, 'gp' now"):
        storage_mod.check_existing_study(storage, "lrs", study_fingerprint(gp, "float32"))


def test_unknown_sampler_is_refused_when_made(tmp_path, model_dir):
    with pytest.raises(SearchError, match="sampler must be one of nsga2, gp, tpe"):
        small(tmp_path, model_dir, sampler="cmaes")


def _history_study() -> optuna.Study:
    """A two-objective study as a search leaves it: feasible scored trials, infeasible ones with -inf values and a
    violated constraint, and raced-out ones whose values are estimates (COMPLETE, like any other)."""
    study = optuna.create_study(directions=["maximize", "maximize"])
    dist = {f"y{i}": optuna.distributions.FloatDistribution(0.5, 2.0) for i in range(3)}
    rng = np.random.default_rng(0)
    for i in range(14):
        params = {k: float(v) for k, v in zip(dist, rng.uniform(0.5, 2.0, 3), strict=True)}
        infeasible = i % 4 == 3
        raced = i % 4 == 2
        values = [-math.inf, -math.inf] if infeasible else [1.0 - abs(params["y1"] - 1.2), 0.5 - abs(params["y0"] - 1)]
        attrs = {TRIAL_ATTR: {"evaluated": not infeasible, "raced_out": raced}}
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=dist,
                values=values,
                user_attrs=attrs,
                system_attrs={"constraints:bound": 1.0 if infeasible else -0.5},
            )
        )
    return study


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_reads_infeasible_and_raced_out_trials(name):
    """Each sampler proposes from a history with -inf values, constraint values and raced-out estimates, without
    a warning reaching the user and with every proposal inside the ranges."""
    study = _history_study()
    study.sampler = build_sampler(name, seed=1, population=4)
    with warnings.catch_warnings(record=True) as seen:
        for _ in range(2):
            trial = study.ask()
            values = [trial.suggest_float(f"y{i}", 0.5, 2.0) for i in range(3)]
            assert all(0.5 <= v <= 2.0 for v in values)
            trial.set_constraint("bound", -0.5)
            study.tell(trial, [0.0, 0.0])
    assert not [w for w in seen if "non-finite" in str(w.message)]


def test_gp_avoids_the_infeasible_region():
    """GPSampler learns feasibility from the constraint values: with every trial above y0 = 1.25 infeasible, its
    model-based proposals stay mostly below it."""
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=build_sampler("gp", seed=3, population=4))

    def objective(trial):
        y0 = trial.suggest_float("y0", 0.5, 2.0)
        y1 = trial.suggest_float("y1", 0.5, 2.0)
        trial.set_constraint("bound", y0 - 1.25)
        if y0 > 1.25:
            return -math.inf, -math.inf
        return -((y1 - 1.0) ** 2), -((y0 - 1.0) ** 2)

    study.optimize(objective, n_trials=STARTUP_TRIALS + 8)
    late = [t.params["y0"] for t in study.trials[STARTUP_TRIALS:]]
    assert sum(y <= 1.3 for y in late) >= 6, late


def test_copy_trials_into_a_gp_study_keeps_scores_and_resumes(searches, model_dir, tmp_path):
    source, _, source_trials = searches["nsga2"]
    target = small(tmp_path / "gp", model_dir, sampler="gp", trials=STARTUP_TRIALS + 5, degree=2, race=())
    summary = copy_trials(target, source.storage_url(), source.study.name)
    complete = [t for t in source_trials if t.state.name == "COMPLETE"]
    assert summary["copied"] + len(summary["skipped"]) == len(complete)
    assert summary["copied"] >= len(complete) - 2 and summary["enqueued"] == []
    copied = optuna.load_study(study_name=target.study.name, storage=target.storage_url()).trials
    by_source = {t.number: t for t in complete}
    for t in copied:
        old = by_source[t.user_attrs["copied_from"]["trial"]]
        assert t.values == old.values and t.params == old.params
        assert t.user_attrs[TRIAL_ATTR] == old.user_attrs[TRIAL_ATTR]
        assert t.system_attrs == old.system_attrs  # constraint values included
    with pytest.raises(SearchError, match="study 'lrs-search' exists in .*: copy trials only into a new study"):
        copy_trials(target, source.storage_url(), source.study.name)
    result = run_search(target)
    trials = load_trials(target)
    new = [t for t in trials if "copied_from" not in t.user_attrs and t.state.name == "COMPLETE"]
    assert len(new) == STARTUP_TRIALS + 5 - summary["copied"]
    assert not any(t.user_attrs.get("baseline") for t in new)  # the copied baselines were not scored again
    assert result.report["study"]["sampler"].startswith("GPSampler")


def test_copy_trials_refuses_a_study_that_scored_something_else(searches, model_dir, tmp_path):
    source, _, _ = searches["nsga2"]
    other = small(tmp_path / "x", model_dir, sampler="gp", pairs=4, degree=2, race=())
    with pytest.raises(SearchError, match="pairs: 3 in the study, 4 now"):
        copy_trials(other, source.storage_url(), source.study.name)
    assert not (tmp_path / "x" / "study.db").exists()


@pytest.mark.parametrize("name", ["gp", "tpe"])
def test_two_workers_share_one_study_with_model_based_samplers(tmp_path, model_dir, name):
    _two_workers(small(tmp_path / name, model_dir, workers=2, trials=STARTUP_TRIALS + 2, sampler=name))
