"""rope_adapter.files, the one way the project writes a file: modes as open() gives them under any umask, a failed
write leaves the old file byte for byte and no temporary, strict JSON that names the file and the field."""

from __future__ import annotations

import errno
import pickle
import stat

import numpy as np
import pytest

from rope_adapter import files
from rope_adapter.errors import FolderFormatError, LrsError, NotJsonError


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077, 0o002], ids=oct)
def test_new_files_get_the_mode_open_would_give_under_the_umask(tmp_path, set_umask, umask):
    """Every way of writing, beside what ``open(path, "w")`` gives: a temporary file made by ``mkstemp`` and
    renamed would be 0600 whatever the umask."""
    from safetensors.numpy import save_file

    set_umask(umask)
    files.write_bytes(tmp_path / "b.bin", b"x")
    files.write_json(tmp_path / "j.json", {"a": 1})
    with files.writing(tmp_path / "w.safetensors") as temp:
        save_file({"t": np.zeros(2, dtype=np.float32)}, str(temp))
    files.append_text(tmp_path / "log.txt", "line\n")
    with open(tmp_path / "plain.txt", "w") as handle:
        handle.write("what open() gives")
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    expected = 0o666 & ~umask
    assert modes == dict.fromkeys(["b.bin", "j.json", "w.safetensors", "log.txt", "plain.txt"], expected), modes


def test_a_replaced_file_keeps_its_mode_and_a_symlink_is_replaced_not_followed(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    path.chmod(0o604)
    files.write_text(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o604
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("the user's")
    link = tmp_path / "link.txt"
    link.symlink_to(elsewhere)
    files.write_text(link, "ours")
    assert not link.is_symlink() and link.read_text() == "ours" and elsewhere.read_text() == "the user's"


def _only(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_byte_for_byte_and_no_temporary(tmp_path, monkeypatch, failure):
    path = tmp_path / "report.json"
    path.write_bytes(b'{"old": true}\n')

    def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr(files.os, "fsync", fail)
    with pytest.raises(type(failure)):
        files.write_json(path, {"new": 1})
    monkeypatch.undo()
    assert path.read_bytes() == b'{"old": true}\n' and _only(tmp_path) == ["report.json"]
    with pytest.raises(type(failure)), files.writing(path) as temp:  # a writer that needs a path, failing midway
        temp.write_bytes(b"half")
        raise failure
    assert path.read_bytes() == b'{"old": true}\n' and _only(tmp_path) == ["report.json"]


def test_a_failed_rename_leaves_no_temporary(tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        files.write_text(folder, "x")  # the target is a folder: the rename fails
    assert _only(tmp_path) == ["a-folder"] and _only(folder) == []


def test_staged_files_land_together_or_not_at_all(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first, second = files.stage(a), files.stage(b)
    first.temp.write_text("A")
    second.temp.write_text("B")
    assert not a.exists() and not b.exists()
    first.commit()
    second.commit()
    assert a.read_text() == "A" and b.read_text() == "B" and _only(tmp_path) == ["a", "b"]
    third = files.stage(a)
    third.temp.write_text("A2")
    third.discard()
    third.commit()  # after discard, nothing: the file stays
    assert a.read_text() == "A" and _only(tmp_path) == ["a", "b"]


def test_append_text_is_the_old_file_followed_by_the_new_text(tmp_path):
    log = tmp_path / "done.jsonl"
    files.append_text(log, "1\n")
    files.append_text(log, "2\n")
    assert log.read_text() == "1\n2\n"


@pytest.mark.parametrize(
    ("value", "field", "what"),
    [
        ({"scores": {"search": {"answer": float("nan")}}}, "scores.search.answer", "nan"),
        ({"curve": [1.0, float("inf")]}, "curve[1]", "inf"),
        ([{"x": -float("inf")}], "[0].x", "-inf"),
        ({"x": np.float64("nan")}, "x", "nan"),
        ({"x": np.float32(1.5)}, "x", "a float32"),
        ({"when": object()}, "when", "a object"),
        ({1: "a"}, "(the value)", "a key of type int"),
    ],
)
def test_strict_json_names_the_file_and_the_field(tmp_path, value, field, what):
    path = tmp_path / "out.json"
    with pytest.raises(NotJsonError) as caught:
        files.write_json(path, value)
    assert caught.value.where == str(path) and caught.value.field == field and what in caught.value.what
    assert str(path) in str(caught.value) and field in str(caught.value)
    assert isinstance(caught.value, LrsError) and not path.exists() and _only(tmp_path) == []
    again = pickle.loads(pickle.dumps(caught.value))  # crosses process boundaries (xdist, spawn workers)
    assert str(again) == str(caught.value)


def test_strict_json_converts_only_what_a_default_converts(tmp_path):
    with pytest.raises(TypeError, match="allow_nan"):
        files.dumps_json({"a": 1}, allow_nan=True)
    assert files.dumps_json({"p": tmp_path}, default=str) == f'{{"p": "{tmp_path}"}}'
    with pytest.raises(NotJsonError, match=r"out\.x is nan"):  # a default converts types, never lets NaN through
        files.dumps_json({"x": np.float32("nan")}, field="out", default=str)
    assert files.dumps_json({"b": [1, 2.5, None, True]}, sort_keys=True) == '{"b": [1, 2.5, null, true]}'


def test_other_formats_left_by_an_earlier_save_are_removed_only_when_ours(tmp_path):
    (tmp_path / "adapter_model.safetensors").write_bytes(b"new")
    (tmp_path / "adapter_model.bin").write_bytes(b"ours")
    (tmp_path / "notes.bin").write_bytes(b"not weights")
    removed = files.clear_other_formats(tmp_path, "adapter", {"adapter_model.safetensors"}, lambda p: True)
    assert [p.name for p in removed] == ["adapter_model.bin"]
    assert _only(tmp_path) == ["adapter_model.safetensors", "notes.bin"]
    (tmp_path / "adapter_model.bin").write_bytes(b"someone else's")
    with pytest.raises(FolderFormatError, match="adapter_model.bin"):
        files.clear_other_formats(tmp_path, "adapter", {"adapter_model.safetensors"}, lambda p: False)
    assert (tmp_path / "adapter_model.bin").read_bytes() == b"someone else's"
    shards = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json"]
    for name in shards:
        (tmp_path / name).write_bytes(b"old shard")
    found = files.clear_other_formats(tmp_path, "model", {"model.safetensors"}, lambda p: True, dry_run=True)
    assert sorted(p.name for p in found) == sorted(shards) and all((tmp_path / n).exists() for n in shards)
