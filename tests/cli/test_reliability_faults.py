"""Issue 11, the last faults: a full disk during a search, a failed write of adapter_model.safetensors, and the
demo's later-step settings checked before its first step. Tiny random models, no Hub, no wall-clock limits."""

from __future__ import annotations

import errno
import sqlite3

import optuna
import pytest
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter.cli import main
from rope_adapter.search import SearchError, SearchSettings, run_search
from rope_adapter.search import storage as storage_mod
from rope_adapter.search import study as study_mod
from rope_adapter.search.fingerprint import study_fingerprint
from rope_adapter.search.storage_failures import storage_errors
from rope_adapter.search.storage_url import open_storage

LAYERS = 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama", num_layers=LAYERS).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def one_line_error(capsys, rc: int, *needles: str, loaded: bool = False) -> str:
    """The CLI's one line; ``loaded``: the model was loaded, so transformers' progress bars stand before it."""
    err = capsys.readouterr().err.strip()
    if loaded:
        err = "\n".join(line for line in err.splitlines() if "Loading weights" not in line)
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rope-adapter: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


# ------------------------------------------------------------------------------------- a full disk, searching


def small(out, model_dir, **overrides) -> SearchSettings:
    kw = dict(model=str(model_dir), pairs=3, num_positions=2, search_records=1, holdout_records=1, trials=3)
    kw.update(population=2, s_min=1.0, s_max=1.5, device="cpu", out=str(out), progress=False, heartbeat=1)
    return SearchSettings.flat(**{**kw, **overrides})


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def sqlite_full(*args, **kwargs):
    """What RDBStorage raises when SQLite reports SQLITE_FULL at the commit (its message blames 'invalid data')."""
    from sqlalchemy.exc import OperationalError

    try:
        raise OperationalError("UPDATE trials", {}, sqlite3.OperationalError("database or disk is full"))
    except OperationalError as exc:
        raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from exc


def full_when_told(monkeypatch, write) -> None:
    """The storage fails when a trial's result is written (``study.tell``), as a disk that fills up mid-search."""
    original = optuna.storages.RDBStorage.set_trial_state_values

    def set_trial_state_values(self, trial_id, state, values=None):
        if state.is_finished():
            write()
        return original(self, trial_id, state, values)

    monkeypatch.setattr(optuna.storages.RDBStorage, "set_trial_state_values", set_trial_state_values)


@pytest.mark.parametrize("write", [enospc, sqlite_full], ids=["ENOSPC", "SQLITE_FULL"])
def test_a_full_disk_during_a_search_is_one_search_error(tmp_path, model_dir, monkeypatch, write):
    """Optuna hides the write error behind its own ``AssertionError: Should not reach.``; the search names the
    storage, the full disk and the fix instead."""
    full_when_told(monkeypatch, write)
    with pytest.raises(SearchError) as info:
        run_search(small(tmp_path / "out", model_dir))
    message = str(info.value)
    assert "the disk holding the study storage sqlite:///" in message and "is full" in message, message
    assert "Optuna's storage layer then failed with an internal AssertionError: Should not reach." in message
    assert "free some space, or start again with another --out" in message
    assert "rerun the same command to resume" in message
    assert ("No space left on device" if write is enospc else "database or disk is full") in message


def test_a_full_disk_during_a_cli_search_is_one_line_and_status_2(tmp_path, model_dir, monkeypatch, capsys):
    full_when_told(monkeypatch, enospc)
    argv = ["search", "--model", str(model_dir), "--pairs", "3", "--num-positions", "2", "--search-records", "1"]
    argv += ["--holdout-records", "1", "--trials", "3", "--population", "2", "--s-max", "1.5", "--device", "cpu"]
    rc = main([*argv, "--no-progress", "--out", str(tmp_path / "out")])
    one_line_error(capsys, rc, "is full", "No space left on device", "free some space", "another --out", loaded=True)
    assert (tmp_path / "out" / "study.db").is_file()  # the study is kept for the rerun


def test_a_real_sqlite_full_database_during_a_search_is_one_search_error(tmp_path, model_dir, monkeypatch):
    """SQLite's own SQLITE_FULL (max_page_count pinned to the file's size once the study exists), not a mock."""
    from sqlalchemy import event

    run_worker = study_mod.run_worker

    def on_a_full_disk(worker, storage, *args, **kwargs):
        def pin(dbapi_connection, *_):
            dbapi_connection.execute("PRAGMA max_page_count = 1")  # never below the current size: no growth

        event.listen(storage.engine, "checkout", pin)
        return run_worker(worker, storage, *args, **kwargs)

    monkeypatch.setattr(study_mod, "run_worker", on_a_full_disk)
    with pytest.raises(SearchError, match=r"is full \(.*database or disk is full.*free some space"):
        run_search(small(tmp_path / "out", model_dir, trials=50))


def test_the_outputs_on_a_full_disk_are_one_search_error(tmp_path, model_dir, monkeypatch):
    from rope_adapter.search import report as report_mod

    monkeypatch.setattr(report_mod, "write_outputs", enospc)
    with pytest.raises(SearchError, match=r"cannot write the search outputs into .*No space left on device; free"):
        run_search(small(tmp_path / "out", model_dir, trials=1))


def test_storage_errors_leave_other_assertion_errors_alone():
    """Only Optuna's own assertion is the storage's: an AssertionError of our code stays what it is."""
    with pytest.raises(AssertionError, match="ours"), storage_errors("sqlite:///x.db"):
        raise AssertionError("ours")
    with pytest.raises(ValueError, match="not a storage error"), storage_errors("sqlite:///x.db"):
        raise ValueError("not a storage error")
    with pytest.raises(SearchError, match=r"cannot be written \(OSError: .*Read-only file system"):
        with storage_errors("sqlite:///x.db"):
            raise OSError(errno.EROFS, "Read-only file system")


# ------------------------------------------------------------------------- a failed adapter_model.safetensors


@pytest.fixture
def saved(tmp_path):
    """A PEFT model and the adapter folder it saved with factors [1.0, 1.3, 1.8]; the model now holds others."""
    from peft import get_peft_model

    from rope_adapter import LrsConfig

    model = get_peft_model(tiny_model("llama", num_layers=LAYERS), LrsConfig(factors=[1.0, 1.3, 1.8]))
    model.save_pretrained(tmp_path / "ad")
    model.base_model.set_factors([2.0, 2.5, 3.0])
    return model, tmp_path / "ad"


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_failed_weights_write_leaves_the_previous_adapter_byte_for_byte(saved, monkeypatch):
    import safetensors.torch

    model, folder = saved
    before = files(folder)
    serialize = safetensors.torch.serialize_file

    def half_written(tensors, filename, metadata=None):
        serialize(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as handle:  # the disk filled up halfway through the file
            handle.truncate(len(before["adapter_model.safetensors"]) // 2)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "serialize_file", half_written)
    with pytest.raises(OSError, match="No space left"):
        model.save_pretrained(folder)
    assert files(folder) == before  # no temporary file either
    monkeypatch.undo()
    model.save_pretrained(folder)  # and the next save works, leaving nothing but the adapter
    assert sorted(files(folder)) == sorted(before)
    assert rope_adapter_factors(folder) == [2.0, 2.5, 3.0]


def test_a_failed_config_write_after_the_weights_leaves_the_previous_adapter(saved, monkeypatch):
    """The weights wait in a temporary file until adapter_config.json is written too: no new weights beside the
    old config."""
    model, folder = saved
    before = files(folder)

    def failing_dumps(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("peft.config.json.dumps", failing_dumps)
    with pytest.raises(OSError, match="No space left"):
        model.save_pretrained(folder)
    assert files(folder) == before
    assert rope_adapter_factors(folder) == [1.0, 1.3, 1.8]


def test_several_adapters_are_each_saved_whole(saved, tmp_path):
    from rope_adapter import LrsConfig

    model, _ = saved
    model.add_adapter("other", LrsConfig(factors=[1.1, 1.1, 1.1]))
    model.save_pretrained(tmp_path / "two")
    assert rope_adapter_factors(tmp_path / "two") == [2.0, 2.5, 3.0]
    assert rope_adapter_factors(tmp_path / "two" / "other") == [1.1, 1.1, 1.1]
    assert sorted(files(tmp_path / "two" / "other")) == ["adapter_config.json", "adapter_model.safetensors"]


def test_other_state_dicts_go_to_safetensors_unchanged(tmp_path):
    """Only an LRS state dict is staged; anything else PEFT saves is written where it asked, as before."""
    import peft.peft_model
    import torch
    from safetensors.torch import load_file

    assert getattr(peft.peft_model.safe_save_file, "_lrs_atomic", False)  # the wrapper is the one PEFT calls
    peft.peft_model.safe_save_file({"lora_A.weight": torch.ones(2)}, str(tmp_path / "w.safetensors"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]
    assert torch.equal(load_file(tmp_path / "w.safetensors")["lora_A.weight"], torch.ones(2))


def rope_adapter_factors(folder) -> list[float]:
    import rope_adapter

    return [round(f, 6) for f in rope_adapter.read_adapter_factors(folder)[1].tolist()]


# ------------------------------------------------------------------------ the demo: later steps checked first


@pytest.fixture
def no_model_load(monkeypatch):
    """No step may load a model's weights (eval, search and export all go through from_pretrained)."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad setting was reported")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def demo_args(model_dir, out, *extra: str) -> list[str]:
    args = ["demo", "--model", str(model_dir), "--pairs", "3", "--positions", "0", "2", "--trials", "3"]
    return [*args, "--search-records", "1", "--eval-records", "2", "--out", str(out), *extra]


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--trials", "0"], ["--trials must be >= 2", "baselines"]),
        (["--trials", "1"], ["--trials must be >= 2", "best uniform"]),
        (["--s-min", "1.5", "--s-max", "1.2"], ["search step", "s_min must be smaller than s_max"]),
        (["--s-min", "1.3", "--s-max", "1.4"], ["none of the uniform factors", "widen the range"]),
        (["--s-max", "1e9"], ["search step", "factor range [0.001, 1000]"]),
        (["--s-min", "nan"], ["search step", "s_min must be a finite number"]),
        (["--population", "1"], ["search step", "population must be >= 2"]),
        (["--positions", "0", "7"], ["search step", "positions [7] outside 0..2"]),
        (["--search-records", "0"], ["--search-records must be >= 1"]),
        (["--eval-records", "0"], ["--eval-records must be >= 1"]),
        (["--pairs", "60"], ["search step", "than the model's 512 positions", "--pairs"]),
    ],
)
def test_demo_refuses_a_later_steps_setting_before_the_first_step(
    model_dir, tmp_path, capsys, no_model_load, extra, needles
):
    out = tmp_path / "demo"
    one_line_error(capsys, main(demo_args(model_dir, out, *extra)), *needles)
    assert not out.exists()
    assert "[1/5]" not in capsys.readouterr().out


def test_demo_refuses_a_model_the_adapter_cannot_scale_before_the_first_step(tmp_path, capsys, no_model_load):
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "gpt2"
    GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=300, bos_token_id=1, eos_token_id=2)
    ).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    capsys.readouterr()  # the save's progress bar
    rc = main(demo_args(folder, tmp_path / "demo"))
    one_line_error(capsys, rc, "the demo's search and export steps need a model the adapter supports", "no rotary")
    assert not (tmp_path / "demo").exists()


def test_demo_refuses_an_out_it_cannot_use_before_the_first_step(model_dir, tmp_path, capsys, no_model_load):
    (tmp_path / "file").write_text("x")
    one_line_error(capsys, main(demo_args(model_dir, tmp_path / "file" / "demo")), "is a file; give a folder")
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "2-search").write_text("in the way")
    one_line_error(capsys, main(demo_args(model_dir, tmp_path / "demo")), "2-search is a file")
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["2-search"]


def test_demo_refuses_a_stored_study_with_other_settings_before_the_first_step(
    model_dir, tmp_path, capsys, no_model_load
):
    """A rerun into the same --out with another --pairs: the search would refuse its study, so nothing runs."""
    out = tmp_path / "demo"
    url = f"sqlite:///{(out / '2-search' / 'study.db').resolve()}"
    (out / "2-search").mkdir(parents=True)
    settings = small(out / "2-search", model_dir, pairs=4, positions=(0, 2), storage=url, study="demo", sampler="gp")
    fingerprint = study_fingerprint(settings, "float32")
    storage = open_storage(url)
    storage_mod.create_or_load_study(storage, "demo", ["maximize"], fingerprint, settings.space.bezier(), [])
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    one_line_error(capsys, main(demo_args(model_dir, out)), "study 'demo' exists with other settings", "pairs")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


# ------------------------------------------------------------------------------------- a model folder that is not there


@pytest.mark.parametrize("command", ["search", "eval", "analyze"])
def test_a_missing_model_folder_is_named_as_such(tmp_path, capsys, command):
    missing = tmp_path / "no-such-model"
    args = [command, "--model", str(missing), "--out", str(tmp_path / "out")]
    one_line_error(capsys, main(args), f"model folder {str(missing)!r} does not exist", "Hub id")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------- a trial taken over after going stale


def test_a_trial_finished_elsewhere_after_its_heartbeat_went_stale_does_not_end_the_worker(
    tmp_path, model_dir, monkeypatch, caplog
):
    """On a busy machine another worker may retry a trial whose heartbeat went stale and finish it first; Optuna
    then refuses this worker's result ("Cannot tell a COMPLETE trial."). The worker drops it and goes on."""
    real = optuna.study.Study.optimize
    calls = []

    def optimize(self, *args, **kwargs):
        calls.append(kwargs.get("timeout"))
        if len(calls) == 1:
            raise ValueError("Cannot tell a COMPLETE trial.")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(optuna.study.Study, "optimize", optimize)
    with caplog.at_level("WARNING", logger="rope_adapter.search.trial"):
        result = run_search(small(tmp_path / "out", model_dir))
    assert len(calls) == 2 and "heartbeat went stale" in caplog.text
    assert len(result.report["trials"]) >= 3


def test_other_value_errors_in_a_worker_are_not_swallowed(tmp_path, model_dir, monkeypatch):
    def optimize(self, *args, **kwargs):
        raise ValueError("something else")

    monkeypatch.setattr(optuna.study.Study, "optimize", optimize)
    with pytest.raises(ValueError, match="something else"):
        run_search(small(tmp_path / "out", model_dir))


def test_a_failed_model_card_write_leaves_the_previous_readme(saved, monkeypatch):
    """PEFT writes README.md first; for an LRS model it goes through a temporary folder and a rename."""
    from huggingface_hub import ModelCard

    model, folder = saved
    before = files(folder)

    def half_written(self, filepath):
        with open(filepath, "w") as handle:  # the disk filled up halfway through the card
            handle.write(str(self)[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ModelCard, "save", half_written)
    with pytest.raises(OSError, match="No space left"):
        model.save_pretrained(folder)
    assert files(folder) == before  # README.md as it was, no temporary folder left
