"""No command deletes or overwrites a file it did not write unless told to: an empty --out is never the current
folder, every write is atomic, a search replaces only its own outputs, the demo replaces its export only with
--overwrite."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from testkit.card_folders import make_adapter
from testkit.searches import small
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter import writable
from rope_adapter.cli import main
from rope_adapter.evaluate.run import EvalError, EvalSettings
from rope_adapter.export import ExportError, export_model
from rope_adapter.search import SearchError, SearchSettings, run_search
from rope_adapter.search import study as study_mod


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir) -> Path:
    return tiny_llama_dir


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
@pytest.mark.parametrize(
    "command",
    [
        ["export", "--model", "M", "--adapter", "A", "--overwrite"],
        ["eval", "--model", "M"],
        ["analyze", "--model", "M"],
        ["search", "--model", "M"],
        ["demo", "--model", "M"],
        ["card", "A"],
    ],
    ids=lambda c: c[0] if isinstance(c, list) else repr(c),
)
def test_an_empty_out_is_refused_and_the_current_folder_is_untouched(
    tmp_path, monkeypatch, capsys, model_dir, command, blank
):
    adapter = make_adapter(tmp_path / "adapter", results=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "results.json").write_text('{"mine": true}\n')
    (cwd / "keep.txt").write_text("the user's file\n")
    before = _snapshot(cwd)
    monkeypatch.chdir(cwd)
    argv = [str(model_dir) if a == "M" else str(adapter) if a == "A" else a for a in command]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", blank])
    assert exit_info.value.code == 2
    assert "is empty" in capsys.readouterr().err
    assert _snapshot(cwd) == before


def test_the_python_api_refuses_an_empty_out_too(tmp_path, model_dir):
    with pytest.raises(ExportError, match="is empty"):
        export_model(str(model_dir), str(make_adapter(tmp_path / "a", results=False)), "", overwrite=True)
    with pytest.raises(SearchError, match="is empty"):
        SearchSettings(model=str(model_dir), out=" ")
    with pytest.raises(EvalError, match="is empty"):
        EvalSettings(model=str(model_dir), out="")


def test_a_card_written_on_a_full_disk_keeps_the_old_card(tmp_path, monkeypatch, capsys):
    adapter = make_adapter(tmp_path / "adapter", results=False)
    card = tmp_path / "cards" / "README.md"
    card.parent.mkdir()
    card.write_text("the old card\n")

    def enospc(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writable.os, "fsync", enospc)
    assert main(["card", str(adapter), "--out", str(card)]) == 2
    assert "No space left" in capsys.readouterr().err
    assert card.read_text() == "the old card\n"
    assert os.listdir(card.parent) == ["README.md"]  # no temporary file left behind


def test_atomic_writes_keep_the_mode_of_the_file_they_replace(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    path.chmod(0o640)
    writable.write_text_atomic(path, "new")
    assert path.read_text() == "new" and (path.stat().st_mode & 0o777) == 0o640


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr(study_mod, "make_worker", refuse)


def test_search_refuses_an_out_with_another_studys_report(tmp_path, model_dir, no_model_load):
    out = tmp_path / "out"
    out.mkdir()
    (out / "search_report.json").write_text(json.dumps({"study": {"name": "other", "storage": "sqlite:///x.db"}}))
    before = _snapshot(out)
    with pytest.raises(SearchError, match=r"study 'other' in sqlite:///x.db.*replaces only its own outputs"):
        run_search(small(out, model_dir))
    assert _snapshot(out) == before


def test_search_refuses_an_adapter_folder_it_did_not_write(tmp_path, model_dir, no_model_load):
    out = tmp_path / "out"
    make_adapter(out / "adapter", results=False)  # the user's adapter, provenance of another study
    (out / "adapter" / "adapter_config.json").write_text(
        json.dumps({**json.loads((out / "adapter" / "adapter_config.json").read_text()), "provenance": None})
    )
    before = _snapshot(out)
    with pytest.raises(SearchError, match="adapter"):
        run_search(small(out, model_dir))
    assert _snapshot(out) == before


def test_search_refuses_a_plot_of_unknown_origin(tmp_path, model_dir, no_model_load):
    out = tmp_path / "out"
    out.mkdir()
    (out / "factors.png").write_bytes(b"the user's figure")
    with pytest.raises(SearchError, match="no search report or adapter that names the study"):
        run_search(small(out, model_dir))
    assert (out / "factors.png").read_bytes() == b"the user's figure"


def test_a_search_resumes_over_its_own_outputs_and_records_no_local_path(tmp_path, model_dir):
    out = tmp_path / "out"
    run_search(small(out, model_dir, trials=5))
    report = json.loads((out / "search_report.json").read_text())
    assert report["study"]["storage"] == "sqlite:///study.db"
    assert str(tmp_path) not in json.dumps(report["study"]) + json.dumps(report["settings"]["storage"])
    run_search(small(out, model_dir, trials=6))  # the same study: its own outputs are replaced
    assert len(json.loads((out / "search_report.json").read_text())["trials"]) >= 6


def test_the_demo_keeps_an_existing_export_without_overwrite(tmp_path, model_dir, capsys):
    out = tmp_path / "demo"
    (out / "4-exported").mkdir(parents=True)
    (out / "4-exported" / "mine.txt").write_text("the user's file\n")
    rc = main(["demo", "--model", str(model_dir), "--pairs", "3", "--positions", "0", "2", "--out", str(out)])
    assert rc == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert (out / "4-exported" / "mine.txt").read_text() == "the user's file\n"
    assert sorted(os.listdir(out)) == ["4-exported"]  # no step ran


def test_a_search_at_one_gold_position_finishes_with_its_held_out_step(tmp_path, model_dir):
    """(was: every trial ran, then a ValueError from the held-out step's k selection)"""
    result = run_search(small(tmp_path / "one", model_dir, positions=(1,), trials=3))
    assert result.report["holdout"]["samples_per_position"] == {"1": 2}
    assert "k_selection" not in result.report["holdout"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--theta", "0"], "--theta (the RoPE base) must be a finite number > 1"),
        (["--theta", "nan"], "--theta (the RoPE base) must be a finite number > 1"),
        (["--max-distance", "1000000000"], "--max-distance must be between 1 and 1048576"),
    ],
)
def test_analyze_refuses_values_it_would_replace_or_cannot_hold(tmp_path, capsys, extra, needle):
    """(was: --theta 0 silently replaced by the model's; --max-distance 1e9 grew to 21 GB)"""
    rc = main(["analyze", "--what", "decay", "--head-dim", "64", *extra, "--out", str(tmp_path / "a")])
    assert rc == 2 and needle in capsys.readouterr().err
    assert not (tmp_path / "a").exists()


def test_a_study_resumed_with_other_weights_in_the_same_folder_is_refused(tmp_path):
    """Same folder name, same config, other weights: the trials would mix two models (issue 18)."""
    from rope_adapter.search import storage as storage_mod

    folder = tmp_path / "model"
    tiny_model("llama", num_layers=4, seed=0).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    settings = small(tmp_path, folder, trials=1, holdout_records=1)
    first = storage_mod.study_fingerprint(settings, "float32")
    assert first["model"]["weights"]
    storage = storage_mod.open_storage(settings.storage_url())
    storage_mod.create_or_load_study(storage, "lrs-search", ["maximize"], first, settings.space(), [])
    tiny_model("llama", num_layers=4, seed=1).save_pretrained(folder)  # other weights, same config.json
    now = storage_mod.study_fingerprint(settings, "float32")
    assert now["model"]["config"] == first["model"]["config"] and now["model"]["weights"] != first["model"]["weights"]
    with pytest.raises(SearchError, match=r"model.weights: .*other weights than the study's"):
        storage_mod.check_existing_study(storage, "lrs-search", now)
    old = {**first, "model": {k: v for k, v in first["model"].items() if k != "weights"}}
    storage_mod.create_or_load_study(storage, "legacy", ["maximize"], old, settings.space(), [])
    assert storage_mod.check_existing_study(storage, "legacy", now)  # made before weights were fingerprinted


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [("Qwen/Qwen2.5-Coder-0.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct"), ("/root/.cache/x/model", None)],
)
def test_peft_card_names_the_base_by_its_hub_id_never_a_local_path(tmp_path, recorded, expected):
    """(was: a found adapter's README said base_model: <home>/.cache/rope-adapter/... while its config had the id)"""
    from peft import get_peft_model

    from rope_adapter import LrsConfig

    model = tiny_model("llama", num_layers=3)
    model.config._name_or_path = str(tmp_path / "cache" / "Qwen2.5-Coder-0.5B-Instruct")
    peft = get_peft_model(model, LrsConfig(factors=[1.0, 1.1, 1.2]))
    peft.peft_config["default"].base_model_name_or_path = recorded
    peft.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    head = (tmp_path / "adapter" / "README.md").read_text().split("\n---", 1)[0]
    assert str(tmp_path) not in head and "/root/" not in head
    if expected:
        assert f"base_model: {expected}" in head and f"base_model:adapter:{expected}" in head
    else:
        assert "base_model" not in head


def test_record_sizes_and_answer_lengths_the_model_cannot_hold_are_refused_at_once(tmp_path, model_dir, capsys):
    """(was: search --pairs 100000 and eval --max-new-tokens 100000 on a 512-position model ran for minutes first)"""
    with pytest.raises(SearchError, match=r"--pairs 100000: the prompts are longer .* than the model's 512 positions"):
        run_search(small(tmp_path / "s", model_dir, pairs=100000))
    base = ["eval", "--model", str(model_dir), "--out", str(tmp_path / "e")]
    assert main([*base, "--max-new-tokens", "100000"]) == 2
    assert "leaves no room for a prompt in the model's 512 positions" in capsys.readouterr().err
    assert main([*base, "--num-pairs", "100000"]) == 2
    assert "--num-pairs 100000: the prompts are longer" in capsys.readouterr().err
    assert not (tmp_path / "s").exists() and not (tmp_path / "e").exists()


@pytest.mark.parametrize("command", ["eval", "export", "analyze"])
def test_embedded_model_errors_are_one_line_in_every_command(tmp_path, monkeypatch, capsys, command):
    """(was: 40-50 lines of traceback from eval, export and analyze; search gave one)"""
    monkeypatch.setenv("ROPE_ADAPTER_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("ROPE_ADAPTER_SMOLLM2_WHEEL", str(tmp_path / "missing.whl"))
    argv = [command, "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "out")]
    if command == "export":
        argv += ["--adapter", str(make_adapter(tmp_path / "adapter", results=False))]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ROPE_ADAPTER_SMOLLM2_WHEEL" in err and "names no file" in err, err


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_export_of_a_base_folder_with_damaged_or_missing_weights_is_one_line(tmp_path, model_dir, capsys, damage):
    """(was: a safetensors or transformers traceback)"""
    import shutil

    base = tmp_path / "base"
    shutil.copytree(model_dir, base)
    weights = base / "model.safetensors"
    if damage == "truncated":
        with open(weights, "r+b") as handle:
            handle.truncate(weights.stat().st_size // 2)
    else:
        weights.unlink()
    adapter = tmp_path / "adapter"
    from peft import get_peft_model

    from rope_adapter import LrsConfig

    get_peft_model(tiny_model("llama", num_layers=4), LrsConfig(factors=[1.0, 1.1, 1.2, 1.3])).save_pretrained(adapter)
    rc = main(["export", "--model", str(base), "--adapter", str(adapter), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len([line for line in err if line.startswith("rope-adapter: error:")]) == 1
    assert ("is damaged" if damage == "truncated" else "has no weights") in err[-1]
    assert "Traceback" not in "\n".join(err) and not (tmp_path / "out").exists()
