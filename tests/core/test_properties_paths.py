"""Properties of the places users give for outputs: blank, relative, unicode and spaced names, existing files and
folders, symlinks to elsewhere and to nothing, a file where a parent folder should be. An LRS adapter's
save_pretrained writes a loadable adapter there and changes nothing else, or refuses with an LrsError before any
change; the settings of search, eval and export refuse a path that cannot be a folder when they are made, and
making them writes nothing; a folder's path alone (blank, a file, a symlink to nothing, a file in the way)
decides whether search, eval and export can write there, before any work."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from peft import get_peft_model
from testkit.properties import FEW, PLACES, SETTINGS, changes, make_place, odd_names, sandbox, snapshot
from testkit.tiny_models import tiny_model

import rope_adapter
from rope_adapter import LrsConfig, LrsError
from rope_adapter.writable import folder_path_reason, unwritable_reason

names = odd_names.filter(lambda n: n not in (".", "..", "elsewhere", "no-such-thing"))
REFUSED = {"existing-file", "symlink-to-file", "dangling-symlink", "under-a-file"}
"""The places that cannot be an output folder, whatever the name."""


@contextlib.contextmanager
def in_sandbox():
    """A fresh sandbox (with ``elsewhere/``) as the current folder, for one example."""
    old = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        root = sandbox(Path(tmp).resolve())
        os.chdir(root)
        try:
            yield root
        finally:
            os.chdir(old)


def _blank(name: str) -> bool:
    return not name.strip()


def _inside(key: str, prefix: Path) -> bool:
    return key == str(prefix) or key.startswith(str(prefix) + os.sep)


@pytest.fixture(scope="module")
def lrs_model():
    return get_peft_model(tiny_model("llama", num_layers=2), LrsConfig(factors=[1.25, 1.5]))


@FEW
@given(st.sampled_from(PLACES), names)
def test_save_pretrained_writes_only_its_folder_or_refuses_before_any_change(lrs_model, place, name):
    with in_sandbox() as root:
        path = make_place(root, place, name)
        before = snapshot(root)
        try:
            lrs_model.save_pretrained(path)
        except LrsError:
            assert _blank(name) or place in REFUSED, (place, name)
            assert changes(before, snapshot(root)) == set()
            return
        assert not _blank(name) and place not in REFUSED, (place, name)
        _, factors = rope_adapter.read_adapter_factors(path)
        assert factors.tolist() == [1.25, 1.5]
        target = Path(os.path.realpath(path)).relative_to(root)
        made = Path(path).relative_to(root) if Path(path).is_absolute() else Path(path)
        outside = {k for k in changes(before, snapshot(root)) if not (_inside(k, target) or _inside(k, made.parts[0]))}
        assert outside == set(), outside


@SETTINGS
@given(st.sampled_from(PLACES), names)
def test_an_output_folder_is_refused_by_its_path_alone_and_nothing_is_written(place, name):
    with in_sandbox() as root:
        path = make_place(root, place, name)
        before = snapshot(root)
        reasons = [folder_path_reason(path, "--out"), unwritable_reason(path, "--out")]
        assert changes(before, snapshot(root)) == set()
        for why in reasons:
            assert (why is None) == (not _blank(name) and place not in REFUSED), (place, name, why)
            assert why is None or why.startswith("--out ")


@SETTINGS
@given(st.sampled_from(PLACES), names, st.sampled_from(["search", "eval"]))
def test_settings_refuse_a_blank_out_when_made_and_write_nothing(place, name, kind):
    from rope_adapter.evaluate import EvalSettings
    from rope_adapter.search import SearchSettings

    with in_sandbox() as root:
        path = make_place(root, place, name)
        before = snapshot(root)
        make = {
            "search": lambda: SearchSettings.flat(out=path),
            "eval": lambda: EvalSettings(out=path),
        }[kind]
        try:
            make()
        except LrsError as exc:
            assert "--out" in str(exc) or "out " in str(exc), str(exc)
        else:
            assert not _blank(name)
        assert changes(before, snapshot(root)) == set()
