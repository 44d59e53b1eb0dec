"""The factor search refuses bad input (settings, data, storage, output folders) before any model is loaded, with
an error that names the fix; a study made with other settings or an older space is refused on resume.

Tiny random models and a byte tokenizer; no wall-clock limits.
"""

from __future__ import annotations

import json

import pytest
from testkit.searches import small

from rope_adapter.scoring.tasks import KVRetrievalTask
from rope_adapter.search import SearchError, SearchSettings, run_search
from rope_adapter.search import study as study_mod
from rope_adapter.search import worker as worker_mod


@pytest.fixture
def no_model_load(monkeypatch):
    """Bad input must fail before any model is loaded."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the bad input was reported")

    monkeypatch.setattr(worker_mod, "load_model", refuse)
    monkeypatch.setattr(study_mod, "make_worker", refuse)


def test_unknown_task(tmp_path, model_dir, no_model_load):
    with pytest.raises(SearchError, match="unknown task 'kv-retrival'; known tasks: .*kv_retrieval"):
        run_search(small(tmp_path, model_dir, task="kv-retrival"))
    with pytest.raises(SearchError, match="perplexity is a guard"):
        run_search(small(tmp_path, model_dir, task="perplexity"))


def test_unreadable_data_file(tmp_path, model_dir, no_model_load):
    with pytest.raises(SearchError, match="does not exist"):
        run_search(small(tmp_path, model_dir, data=str(tmp_path / "missing.jsonl.gz")))
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"this is not gzip")
    with pytest.raises(
        SearchError, match=r"cannot use the data of task 'kv_retrieval': cannot read data file .*broken\.jsonl\.gz"
    ):
        run_search(small(tmp_path, model_dir, data=str(broken)))
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"question": "no kv records here"}\n')
    with pytest.raises(SearchError, match="ordered_kv_records"):
        run_search(small(tmp_path, model_dir, data=str(wrong)))


def test_data_file_too_small_for_the_split(tmp_path, model_dir, no_model_load):
    data = tmp_path / "two.jsonl"
    rows = KVRetrievalTask(num_records=2, num_pairs=3, num_positions=3, seed=0).load_records()
    data.write_text("".join(json.dumps({"ordered_kv_records": [list(p) for p in r.pairs]}) + "\n" for r in rows))
    with pytest.raises(SearchError, match="2 records available"):
        run_search(small(tmp_path, model_dir, data=str(data)))


def test_unreachable_storage(tmp_path, model_dir, no_model_load):
    url = "postgresql+psycopg2://someone:s3cret-pw@127.0.0.1:1/nowhere"
    with pytest.raises(SearchError) as info:
        run_search(small(tmp_path, model_dir, storage=url))
    message = str(info.value)
    assert "s3cret-pw" not in message
    assert "cannot reach the study storage" in message or "driver" in message
    with pytest.raises(SearchError, match="does not exist"):
        run_search(small(tmp_path, model_dir, storage=f"sqlite:///{tmp_path}/no/such/dir/study.db"))
    with pytest.raises(SearchError, match="not a database URL"):
        run_search(small(tmp_path, model_dir, storage="not a url"))


def test_study_with_other_settings(tmp_path, model_dir):
    run_search(small(tmp_path, model_dir, trials=1, holdout_records=1))
    with pytest.raises(SearchError, match=r"exists with other settings \(.*data_seed: 0 in the study, 1 now"):
        run_search(small(tmp_path, model_dir, trials=1, holdout_records=1, data_seed=1))
    with pytest.raises(SearchError, match="space.s_max"):
        run_search(small(tmp_path, model_dir, trials=1, holdout_records=1, s_max=1.7))
    # another study name in the same storage is fine, with its own --out (it would replace the first one's outputs)
    with pytest.raises(SearchError, match="replaces only its own outputs"):
        run_search(small(tmp_path, model_dir, trials=1, holdout_records=1, data_seed=1, study="other"))
    shared = f"sqlite:///{tmp_path / 'study.db'}"
    run_search(
        small(tmp_path / "o", model_dir, trials=1, holdout_records=1, data_seed=1, study="other", storage=shared)
    )


def test_open_storage_retries_only_the_schema_race(tmp_path, monkeypatch):
    """Two processes opening one fresh SQLite file can both insert Optuna's schema version row: the later one gets
    a unique-constraint error and opens the (now complete) schema on a retry. Other errors are not retried."""
    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError

    from rope_adapter.search import storage_url

    real = optuna.storages.RDBStorage
    calls = []

    def flaky(error):
        def make(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise error
            return real(*args, **kwargs)

        return make

    monkeypatch.setattr(storage_url.time, "sleep", lambda s: None)
    race = IntegrityError("INSERT INTO alembic_version", {}, Exception("UNIQUE constraint failed"))
    monkeypatch.setattr(optuna.storages, "RDBStorage", flaky(race))
    assert isinstance(storage_url.open_storage(f"sqlite:///{tmp_path}/a.db"), real)
    assert len(calls) == 2
    calls.clear()
    other = OperationalError("SELECT", {}, Exception("disk I/O error"))
    monkeypatch.setattr(optuna.storages, "RDBStorage", flaky(other))
    with pytest.raises(SearchError, match="cannot reach the study storage.*disk I/O error"):
        storage_url.open_storage(f"sqlite:///{tmp_path}/b.db")
    assert len(calls) == 1


def test_a_study_made_before_end_ys_were_bounded_resumes_only_with_endpoint_margin(tmp_path, model_dir):
    """Its stored settings have no ``endpoint_margin`` and its trials were sampled with widened end ys: resuming it
    with the new default would change its distributions under NSGA-II, so it is refused with the fix."""
    from rope_adapter.search import storage as storage_mod
    from rope_adapter.search.fingerprint import study_fingerprint
    from rope_adapter.search.storage_url import open_storage

    settings = small(tmp_path, model_dir, storage=f"sqlite:///{tmp_path}/study.db", sampler="nsga2")
    old = study_fingerprint(settings, "float32")
    del old["space"]["endpoint_margin"], old["sampler"]  # it was made before both settings existed
    storage = open_storage(settings.study.storage)
    storage_mod.create_or_load_study(storage, "lrs", ["maximize"], old, settings.space.bezier(), [])
    with pytest.raises(SearchError, match=r"space.endpoint_margin: True in the study, False now.*--endpoint-margin"):
        storage_mod.check_existing_study(storage, "lrs", study_fingerprint(settings, "float32"))
    legacy = small(tmp_path, model_dir, storage=settings.study.storage, endpoint_margin=True, sampler="nsga2")
    assert storage_mod.check_existing_study(storage, "lrs", study_fingerprint(legacy, "float32"))


def test_a_study_made_with_the_earlier_default_of_five_positions_resumes_with_num_positions_5(tmp_path, model_dir):
    """Made when kv_retrieval's default was 5 gold positions (stored as 5): the default now (the task's own, 25 or
    every position of a shorter record) is refused with the flag that resumes it."""
    from rope_adapter.search import storage as storage_mod
    from rope_adapter.search.fingerprint import study_fingerprint
    from rope_adapter.search.storage_url import open_storage

    earlier = small(
        tmp_path, model_dir, storage=f"sqlite:///{tmp_path}/study.db", pairs=6, num_positions=5, sampler="gp"
    )
    storage = open_storage(earlier.study.storage)
    fingerprint = study_fingerprint(earlier, "float32")
    storage_mod.create_or_load_study(storage, "lrs", ["maximize"], fingerprint, earlier.space.bezier(), [])
    now = small(tmp_path, model_dir, storage=earlier.study.storage, pairs=6, num_positions=None, sampler="gp")
    assert now.task.num_positions is None
    with pytest.raises(SearchError, match=r"num_positions: 5 in the study, None now.*--num-positions 5"):
        storage_mod.check_existing_study(storage, "lrs", study_fingerprint(now, "float32"))
    assert storage_mod.check_existing_study(storage, "lrs", fingerprint)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(s_min=1.5, s_max=1.2), "s_min must be smaller than s_max"),
        (dict(s_min=0.0), "s_min must be positive"),
        (dict(layer_bounds=("0-1:1.6:1.8",)), "no factor for layer 0"),
        (dict(layer_bounds=("2-9:1.0:1.1",)), "model has 4 layers"),
        (dict(layer_bounds=("0-1:1.2:1.1",)), "low <= high"),
        (dict(uniform=(1.05, 1.7)), r"uniform baselines \[1.7\]"),
        (dict(trials=None), "stopping rule"),
        (dict(x_mode="curvy"), "x_mode"),
        (dict(select="best"), "select"),
        (dict(workers=0), "workers"),
        (dict(positions=(0, 7)), "positions"),
        (dict(task_options={"filler": 3}), "does not take filler"),
        (dict(ppl_text="x.txt"), "needs --max-ppl-increase"),
    ],
)
def test_bad_settings_fail_before_loading(tmp_path, model_dir, no_model_load, overrides, message):
    with pytest.raises(SearchError, match=message):
        run_search(small(tmp_path, model_dir, **overrides))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"trials": "5"}, "trials must be an integer, got '5'"),
        ({"pairs": True}, "pairs must be an integer"),
        ({"s_max": float("inf")}, "s_max must be a finite number"),
        ({"position_weights": (1.0, 2.0)}, "2 position weights for 20 gold positions"),
        ({"pairs": 30, "position_weights": (1.0, 2.0)}, "2 position weights for 25 gold positions"),
        ({"pairs": (10, 30), "position_weights": (1.0,)}, "known only from the records"),
        ({"positions": (0, 4), "position_weights": (1.0, 2.0, 3.0)}, "3 position weights for 2 gold positions"),
        ({"k": 0}, "k must be"),
        ({"race": 0.5}, "race must be a list"),
    ],
)
def test_bad_settings_are_refused_when_made(kwargs, match, tmp_path):
    """SearchSettings validates itself in __post_init__: nothing is created, no model is loaded."""
    with pytest.raises(SearchError, match=match):
        SearchSettings.flat(out=str(tmp_path / "never"), **kwargs)
    assert not (tmp_path / "never").exists()


def test_cli_refuses_wrong_weight_count_before_any_output(tmp_path, model_dir, no_model_load, capsys):
    """A real model folder, so the weight count is the only thing wrong: 2 weights for the default 5 positions."""
    from rope_adapter.cli import main

    out = tmp_path / "never"
    assert main(["search", "--model", str(model_dir), "--position-weights", "1", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "2 position weights for 20 gold positions" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_prompts_longer_than_the_model_are_refused_before_any_output(tmp_path, model_dir):
    out = tmp_path / "never"
    with pytest.raises(SearchError, match=r"longer \(\d+ tokens at (most|least)\b.*than the model's \d+ positions"):
        run_search(small(out, model_dir, pairs=60))
    assert not out.exists()


def test_an_output_folder_that_cannot_be_written_is_refused(tmp_path, model_dir):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    with pytest.raises(SearchError, match="cannot write into the output folder"):
        run_search(small(blocker / "out", model_dir))
    assert blocker.read_text() == "in the way"


def test_several_data_files_are_refused_in_one_line_before_any_model_loads(tmp_path, model_dir, no_model_load, capsys):
    """One Lost-in-the-Middle file per record length (here 3 and 4 keys) is not a multi-length study: the refusal
    names the alternative (generated records at each length, or one search per file)."""
    from rope_adapter.cli import main
    from rope_adapter.search.fingerprint import study_fingerprint

    paths = []
    for pairs in (3, 4):
        rows = KVRetrievalTask(num_records=12, num_pairs=pairs, num_positions=3, seed=0).load_records()
        path = tmp_path / f"kv_retrieval_{pairs}_keys.jsonl"
        path.write_text("".join(json.dumps({"ordered_kv_records": [list(p) for p in r.pairs]}) + "\n" for r in rows))
        paths.append(str(path))
    out = tmp_path / "never"
    for data in (["--data", *paths], ["--data", paths[0], "--data", paths[1]]):
        argv = ["search", "--model", str(model_dir), *data, "--pairs", "3", "4", "--out", str(out)]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("rope-adapter: error: --data takes one file, got 2 (") and "\n" not in err
        assert "leave out --data and give them (--pairs 75 140" in err and "run one search per file" in err
    with pytest.raises(SearchError, match="--data takes one file, got 2"):
        SearchSettings.flat(out=str(out), data=tuple(paths))
    assert not out.exists()
    one = small(tmp_path, model_dir, data=[paths[0]], sampler="gp")  # a list of one file is that file, as before
    assert one.task.data == paths[0]
    assert study_fingerprint(one, "float32") == study_fingerprint(
        small(tmp_path, model_dir, data=paths[0], sampler="gp"), "float32"
    )
