"""One study over several record lengths (``--pairs 2 3`` on the tiny model): every trial is scored at each length,
the objectives are the mean and the worst over every (length, gold position), racing pairs by record across lengths,
and the report has one entry per length. A single length is what it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from testkit.searches import small

from rope_adapter.cli.search import settings_from_argv
from rope_adapter.provenance import Provenance
from rope_adapter.records import check_record
from rope_adapter.search import SearchError, run_search
from rope_adapter.search.data import SEARCH, length_samples, length_splits, load_split
from rope_adapter.search.fingerprint import study_fingerprint
from rope_adapter.search.lengths import KEY_BASE, length_key, split_key
from rope_adapter.search.worker import make_worker


def test_pairs_takes_one_length_or_several(tmp_path, model_dir):
    one = small(tmp_path, model_dir, pairs=[3], sampler="gp")
    assert one.task.pairs == 3 and isinstance(one.task.pairs, int)  # a list of one length is that length, as before
    assert study_fingerprint(one, "float32")["pairs"] == 3
    several = small(tmp_path, model_dir, pairs=[3, 4], sampler="gp")
    assert several.task.pairs == (3, 4)
    assert study_fingerprint(several, "float32")["pairs"] == [3, 4]  # equal to what the study's JSON holds
    assert settings_from_argv(["--pairs", "3", "--out", str(tmp_path)]).task.pairs == 3
    assert settings_from_argv(["--pairs", "3", "4", "--out", str(tmp_path)]).task.pairs == (3, 4)
    with pytest.raises(SearchError, match="pairs must be one or more different record lengths"):
        small(tmp_path, model_dir, pairs=[3, 3])
    with pytest.raises(SearchError, match="pairs must be integers >= 1"):
        small(tmp_path, model_dir, pairs=[3, 0])
    with pytest.raises(
        SearchError, match="several record lengths \\(--pairs 3 4\\) need a task that generates its records"
    ):
        small(tmp_path, model_dir, pairs=[3, 4], task="passkey")
    weighted = small(tmp_path, model_dir, pairs=[3, 4], objective="weighted", position_weights=(1, 2, 3))
    assert weighted.objective_spec().position_weights == (1, 2, 3, 1, 2, 3)


def test_each_length_is_split_as_a_study_of_that_length(tmp_path, model_dir):
    settings = small(tmp_path, model_dir, pairs=(3, 4), search_records=8, race=(0.5,))
    splits = length_splits(settings)
    for (pairs, _, search, holdout, confirm), alone in zip(splits, (3, 4), strict=True):
        _, search_alone, holdout_alone = load_split(settings.updated(pairs=alone))
        assert pairs == alone and search == search_alone and holdout == holdout_alone and len(confirm) == 4
        assert all(len(r.pairs) == alone for r in search + holdout + confirm)
    samples = length_samples(splits, SEARCH, 0, 4)
    assert {split_key(s.position)[0] for s in samples} == {3, 4}
    assert len(samples) == 2 * 4 * 3  # two lengths, four records, three positions


@pytest.fixture(scope="module")
def multi(tmp_path_factory, model_dir):
    settings = small(
        tmp_path_factory.mktemp("lengths"),
        model_dir,
        pairs=(2, 3),
        num_positions=2,
        search_records=5,
        race=(0.8,),  # stages of 4 and 5 records
        trials=7,
        confirm_top=1,
    )
    return settings, run_search(settings)


def test_racing_stages_cover_every_length_in_the_search_order(multi):
    settings, _ = multi
    worker = make_worker(settings, 0, with_holdout=False)
    staged = [s for stage in worker.stages for s in stage.samples]
    assert [(s.record_id, s.position) for s in staged] == [(s.record_id, s.position) for s in worker.search.samples]
    first = worker.stages[0].samples
    assert {split_key(s.position)[0] for s in first} == {2, 3} and len({s.record_id for s in first}) == 4
    assert worker.stage_ends == [4, 5]
    # a record index is one racing unit at every length
    assert max(worker.sample_records) == settings.search_records - 1
    for s, r in zip(worker.search.samples, worker.sample_records, strict=True):
        assert [x.record_id for x in worker.search.samples][worker.sample_records.index(r)] == s.record_id


def test_objectives_are_over_every_length_and_position(multi):
    settings, result = multi
    keys = {length_key(2, 0), length_key(2, 1), length_key(3, 0), length_key(3, 2)}
    evaluated = [t for t in result.report["trials"] if t["evaluated"]]
    assert evaluated
    for trial in evaluated:
        by_position = {int(k): v for k, v in trial["by_position"].items()}
        assert set(by_position) == keys
        assert trial["values"][0] == pytest.approx(np.mean(list(by_position.values())))
        assert trial["values"][1] == pytest.approx(min(by_position.values()))
    assert set(result.report["task"]["positions"]) == keys


def test_report_has_one_entry_per_length(multi):
    settings, result = multi
    report = json.loads((Path(settings.out) / "search_report.json").read_text())
    entries = report["by_length"]
    assert [e["pairs"] for e in entries] == [2, 3]
    assert [e["positions"] for e in entries] == [[0, 1], [0, 2]]
    chosen = {int(k): v for k, v in report["chosen"]["by_position"].items()}
    for entry in entries:
        mine = [v for k, v in chosen.items() if k // KEY_BASE == entry["pairs"]]
        assert entry["search"]["found"]["mean"] == pytest.approx(np.mean(mine))
        assert entry["search"]["found"]["worst"] == pytest.approx(min(mine))
        assert set(entry["holdout"]) == {"base", "best_uniform", "found"}
        assert entry["differences"]["found-base"]["mean"]["n_records"] == settings.holdout_records
        # the verdict's metric per length too, on this length's samples only (its positions, every held-out record)
        tf = entry["differences"]["found-best_uniform"]["tf_accuracy"]
        assert tf["mean"]["n_records"] == settings.holdout_records
        assert set(tf["by_position"]) == {str(length_key(entry["pairs"], p)) for p in entry["positions"]}
        assert set(entry["confirmation"]) == {str(c["trial"]) for c in report["confirmation"]["candidates"]}
    summary = (Path(settings.out) / "search_report.md").read_text()
    assert "## By record length" in summary and "pos 3:2" in summary
    assert (Path(settings.out) / "positions.png").is_file()
    # the adapter's provenance names both lengths and reads back against its record (as cards read it)
    provenance = json.loads((Path(settings.out) / "adapter" / "adapter_config.json").read_text())["provenance"]
    check_record(provenance, Provenance, "adapter_config.json")
    assert provenance["task"]["pairs"] == [2, 3]
