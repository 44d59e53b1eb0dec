"""Confirm before choosing: the top curves are re-scored on confirmation records (disjoint from the search and
held-out ones), the adapter and the best uniform factor are chosen there, and a resumed study does not score them
again. Tiny random model; the records are generated or a small Lost-in-the-Middle-style file."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest
from testkit.litm_files import write_kv_file
from testkit.searches import small

from rope_adapter.search import SearchError, part_progress, run_search
from rope_adapter.search import study as study_mod
from rope_adapter.search.confirm import candidates, run_confirmation
from rope_adapter.search.data import load_confirmation, load_split
from rope_adapter.search.selection import trial_record


def _ids(records) -> list[str]:
    return [r.record_id for r in records]


@pytest.mark.parametrize("from_file", [False, True])
def test_confirmation_records_are_disjoint_and_leave_the_split_alone(tmp_path, model_dir, from_file):
    """Search, held-out and confirmation records are three disjoint sets of one seeded draw; turning confirmation
    on changes neither the search nor the held-out records."""
    overrides = {"search_records": 5, "holdout_records": 4, "confirm_records": 6}
    if from_file:
        overrides["data"] = str(write_kv_file(tmp_path / "kv.jsonl", num_records=20, num_pairs=3))
    on = small(tmp_path / "out", model_dir, **overrides)
    off = replace(on, confirm_top=0)
    _, search, holdout = load_split(on)
    _, search_off, holdout_off = load_split(off)
    confirm = load_confirmation(on)
    assert _ids(search) == _ids(search_off) and _ids(holdout) == _ids(holdout_off)
    assert len(confirm) == 6 and load_confirmation(off) == []
    sets = [set(_ids(search)), set(_ids(holdout)), set(_ids(confirm))]
    assert sum(len(s) for s in sets) == len(set().union(*sets)) == 15
    assert _ids(load_confirmation(on)) == _ids(confirm)  # the same draw every time
    if from_file:
        with pytest.raises(SearchError, match="20 records available but 5 search \\+ 4 held-out \\+ 16 confirmation"):
            load_split(replace(on, confirm_records=16))


def test_bad_confirmation_settings_are_refused(tmp_path, model_dir):
    with pytest.raises(SearchError, match="confirm_top must be >= 0"):
        small(tmp_path, model_dir, confirm_top=-1)
    with pytest.raises(SearchError, match="confirm_records must be >= 1 when confirm_top is 3"):
        small(tmp_path, model_dir, confirm_records=0)
    with pytest.raises(SearchError, match="confirm_records must be an integer"):
        small(tmp_path, model_dir, confirm_records=2.5)


@pytest.fixture(scope="module")
def searched(tmp_path_factory, model_dir):
    """A finished tiny search without confirmation (the search set's choice) and its settings."""
    settings = small(tmp_path_factory.mktemp("confirm"), model_dir, trials=12, confirm_top=0)
    return settings, run_search(settings)


def test_confirmation_chooses_on_its_own_records_and_resumes_without_rescoring(searched, monkeypatch):
    """A confirmation score that ranks the third search-set candidate first makes it the adapter (and the search
    set's choice is reported beside it); running the finished study again reads the stored scores back."""
    settings, first = searched
    spec = settings.objective_spec()
    records = first.report["trials"]
    top = candidates(records, spec, settings.objective.select, 3)
    assert len(top["searched"]) == 3 and len(top["uniform"]) >= 2
    assert first.chosen_trial == top["searched"][0]["number"]  # without confirmation: the search-set best
    favourite = {"searched": top["searched"][2]["factors"], "uniform": top["uniform"][1]["factors"]}
    calls: list[list[float]] = []

    def score(factors):  # 1 for the favourites, 0 for the rest: the confirmation ranking differs from the search's
        calls.append(list(factors))
        return np.full(6, 1.0 if list(factors) in favourite.values() else 0.0)

    real = study_mod.run_confirmation
    monkeypatch.setattr(study_mod, "run_confirmation", lambda *a, **k: real(*a, **k, score=score))
    confirmed = settings.updated(confirm_top=3, confirm_records=2, trials=0)
    result = run_search(confirmed)
    report = result.report
    confirmation = report["confirmation"]
    assert len(calls) == len(top["searched"]) + len(top["uniform"][:3])
    assert confirmation["found"] == top["searched"][2]["number"] != confirmation["search_found"] == first.chosen_trial
    assert confirmation["best_uniform"] == top["uniform"][1]["number"]
    assert result.chosen_trial == top["searched"][2]["number"]
    assert result.factors == favourite["searched"]
    assert report["baselines"]["best_uniform"]["trial"] == top["uniform"][1]["number"]
    assert report["holdout"]["configs"]["found"]["trial"] == top["searched"][2]["number"]
    assert report["holdout"]["configs"]["best_uniform"]["uniform"] == top["uniform"][1]["uniform"]
    saved = json.loads((Path(settings.out) / "adapter" / "adapter_config.json").read_text())
    assert saved["factors"] == pytest.approx(favourite["searched"])
    for c in confirmation["candidates"]:
        assert c["scored_this_run"]
        assert c["confirmation"]["mean"] == (1.0 if c["factors"] in favourite.values() else 0.0)
        assert c["gap"]["mean"] == pytest.approx(c["search"]["mean"] - c["confirmation"]["mean"])
    summary = (Path(settings.out) / "search_report.md").read_text()
    assert f"adapter trial {confirmation['found']} (the search set chose trial {first.chosen_trial})" in summary

    calls.clear()
    again = run_search(confirmed).report["confirmation"]
    assert calls == []  # resumed: every score read back from the study
    assert not any(c["scored_this_run"] for c in again["candidates"])
    assert again["found"] == confirmation["found"] and again["best_uniform"] == confirmation["best_uniform"]


def test_confirmation_scores_with_the_model(searched, caplog):
    """Without a stand-in: candidates scored by the worker on the confirmation records, stored in the study; without
    a progress bar, one log line per part."""
    caplog.set_level(logging.INFO, logger=part_progress.logger.name)
    settings, first = searched
    assert not settings.progress
    confirmed = settings.updated(confirm_top=2, confirm_records=3)
    worker = study_mod.make_worker(confirmed, 0)
    assert len({s.record_id for s in worker.confirm.samples}) == 3
    assert not {s.record_id for s in worker.confirm.samples} & {s.record_id for s in worker.search.samples}
    study = optuna.load_study(study_name=settings.study.name, storage=settings.storage_url())
    trials = study.get_trials()
    confirmation = run_confirmation(study, trials, worker, (first.chosen_trial, None))
    top = candidates([trial_record(t) for t in trials], settings.objective_spec(), settings.objective.select, 2)
    assert [c["trial"] for c in confirmation["candidates"]] == [r["number"] for r in top["searched"] + top["uniform"]]
    expected = worker.evaluator.score(top["searched"][0]["factors"], worker.confirm).by_position
    got = confirmation["candidates"][0]["by_position"]
    assert got == pytest.approx({str(p): v for p, v in expected.items()}, abs=1e-6)  # stored to 6 decimals
    stored = optuna.load_study(study_name=settings.study.name, storage=settings.storage_url()).user_attrs
    assert f"confirmation:3:{top['searched'][0]['number']}" in stored
    lines = [r.getMessage() for r in caplog.records if r.name == part_progress.logger.name]
    parts = len(confirmation["candidates"]) * len(worker.confirm_parts or [worker.confirm])
    assert len(lines) == parts and lines[-1].startswith(f"confirmation records: {parts} of {parts} parts scored")


def test_a_confirmation_stopped_inside_a_candidate_resumes_at_its_next_part(searched, monkeypatch):
    """Candidates are scored a part (here one record) at a time and each part is kept: a Ctrl-C in the middle of
    the second candidate loses only the part it was in, and the scores come out as one whole pass gives them."""
    from rope_adapter.search import worker as worker_mod
    from rope_adapter.search.kept_scores import PARTS_SUFFIX

    settings, first = searched
    monkeypatch.setattr(worker_mod, "PART_RECORDS", 1)
    confirmed = settings.updated(confirm_top=2, confirm_records=5)
    worker = study_mod.make_worker(confirmed, 0)
    assert len(worker.confirm_parts) == 5
    joined = [s for part in worker.confirm_parts for s in part.samples]
    assert [(s.record_id, s.position) for s in joined] == [(s.record_id, s.position) for s in worker.confirm.samples]
    real, calls, stop = worker.evaluator.score, [], [8]

    def stopping(factors, task, **kw):
        calls.append(task)
        if len(calls) in stop:  # the third part of the second candidate, once
            stop.clear()
            raise KeyboardInterrupt
        return real(factors, task, **kw)

    monkeypatch.setattr(worker.evaluator, "score", stopping)
    study = optuna.load_study(study_name=settings.study.name, storage=settings.storage_url())
    with pytest.raises(KeyboardInterrupt):
        run_confirmation(study, study.get_trials(), worker, (first.chosen_trial, None))
    top = candidates(
        [trial_record(t) for t in study.get_trials()], settings.objective_spec(), settings.objective.select, 2
    )
    second = top["searched"][1]["number"]
    kept = study.user_attrs[f"confirmation:5:{second}{PARTS_SUFFIX}"]
    assert kept["parts"] == 5 and len(kept["done"]) == 2
    calls.clear()
    confirmation = run_confirmation(study, study.get_trials(), worker, (first.chosen_trial, None))
    assert len(calls) == 3 + 5 * (len(confirmation["candidates"]) - 2)  # the second's last 3 parts, then the rest
    assert [c["scored_this_run"] for c in confirmation["candidates"][:2]] == [False, True]
    for c in confirmation["candidates"]:
        expected = real(c["factors"], worker.confirm).by_position
        assert c["by_position"] == pytest.approx({str(p): v for p, v in expected.items()}, abs=1e-6)
