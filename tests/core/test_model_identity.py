"""A model is named by everything in it that changes a score (:func:`rope_adapter.identity.model_identity`): every
file of a model folder but Markdown and hidden files, and a Hub model by its commit; what earlier releases recorded
(the older forms) still matches the same model."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from pathlib import Path

import pytest
import torch
from testkit.hub_cache import HubCache
from testkit.tiny_models import save_model_folder, tiny_model

from rope_adapter.identity import ADDED_SINCE, is_older_form, model_identity

EXTRA_FILES = {
    "chat_template.jinja": "{{ messages }}",
    "generation_config.json": '{"do_sample": false}',
    "modeling_custom.py": "# remote code\n",
    "added_tokens.json": "{}",
}
NOT_SCORED = {"README.md": "# a model card\n", ".gitattributes": "*.safetensors filter=lfs\n"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    path = save_model_folder(tiny_model("llama", num_layers=2), tmp_path_factory.mktemp("identity") / "model")
    for name, text in {**EXTRA_FILES, **NOT_SCORED}.items():
        (path / name).write_text(text)
    return path


def _edited(folder: Path, tmp_path: Path, name: str) -> Path:
    copy = shutil.copytree(folder, tmp_path / folder.name)
    with open(copy / name, "ab") as handle:
        handle.write(b" ")
    return copy


def test_every_file_that_can_change_a_score_changes_the_identity(folder, tmp_path):
    """Each file of a real saved folder (config, weights, tokenizer files) and the others that shape prompts or the
    model, one byte changed at a time; a model card or a hidden file changes nothing."""
    before = model_identity(str(folder))
    assert set(before) == {"folder", "config", "weights", "files", "weights_sha256"}
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    assert {"config.json", "model.safetensors", "tokenizer.json", *EXTRA_FILES} <= set(names)
    for i, name in enumerate(names):
        edited = _edited(folder, tmp_path / str(i), name)
        same = model_identity(str(edited)) == before
        assert same == (name in NOT_SCORED), name


def test_older_forms_match_the_same_model_only(folder, tmp_path, monkeypatch):
    now = model_identity(str(folder))
    older = {k: v for k, v in now.items() if k not in ADDED_SINCE}
    assert is_older_form(older, now) and not is_older_form(now, older)
    other = model_identity(str(_edited(folder, tmp_path, "model.safetensors")))
    assert not is_older_form(older, other) and not is_older_form(now, other)
    hub = HubCache(tmp_path / "hf-cache", "org/tiny", monkeypatch)
    hub.publish(folder, "c" * 40)
    named = model_identity(hub.repo)
    assert named == {"hub": hub.repo, "revision": "c" * 40}
    assert is_older_form(hub.repo, named) and not is_older_form("org/other", named)
    assert model_identity("org/not-cached") == "org/not-cached"  # cannot be resolved: the name, as before


def test_a_change_anywhere_in_the_weights_changes_the_identity(folder, tmp_path):
    """One byte of one tensor changed, at offsets spread over a weights file much larger than the sampled chunks of
    the cheap fingerprint (was: a folder was named by 64 chunks of 64 KiB, so a merged LoRA on a few projections,
    same config and file size, could resume another model's study)."""
    from safetensors.torch import save_file

    copy = shutil.copytree(folder, tmp_path / folder.name)
    weights = copy / "model.safetensors"
    save_file({"w": torch.arange(3_000_000, dtype=torch.float32)}, str(weights))  # 12 MB
    before = model_identity(str(copy))
    size = weights.stat().st_size
    offsets = [size - 1, *(size * i // 97 + 12_345 for i in range(97))]
    sampled_missed = 0
    with open(weights, "r+b") as handle:
        for offset in offsets:
            handle.seek(offset)
            old = handle.read(1)
            handle.seek(offset)
            handle.write(bytes([old[0] ^ 0x01]))
            handle.flush()
            now = model_identity(str(copy))
            assert now != before, offset
            assert now["weights_sha256"] != before["weights_sha256"], offset
            sampled_missed += now["weights"] == before["weights"]
            handle.seek(offset)
            handle.write(old)
            handle.flush()
    assert model_identity(str(copy)) == before
    assert sampled_missed > 0  # the sampled fingerprint alone misses some: the test can see what it guards


def test_an_embedded_model_is_named_by_its_gguf(monkeypatch):
    """Another GGUF under the same alias (a release that ships other weights) is another model; the alias alone, as
    earlier releases recorded it, still names the model."""
    from rope_adapter.embedded.registry import DEFAULT_MODEL, EMBEDDED_MODELS

    spec = EMBEDDED_MODELS[DEFAULT_MODEL]
    named = model_identity(spec.name.upper())
    assert named == {"embedded": spec.name, "gguf_sha256": spec.gguf_sha256}
    assert is_older_form(spec.name, named) and not is_older_form(named, spec.name)
    assert not is_older_form("another-model", named)
    monkeypatch.setitem(EMBEDDED_MODELS, DEFAULT_MODEL, dataclasses.replace(spec, gguf_sha256="0" * 64))
    assert model_identity(spec.name) != named


def test_older_folder_forms_lack_only_fields_added_since(folder):
    """Every subset of the fields added since, left out, is an older form of the same folder; a record with any
    other field changed or missing is not."""
    now = model_identity(str(folder))
    added = sorted(ADDED_SINCE)
    for n in range(1, len(added) + 1):
        for left_out in itertools.combinations(added, n):
            older = {k: v for k, v in now.items() if k not in left_out}
            assert is_older_form(older, now), left_out
            assert not is_older_form(now, older)
            assert not is_older_form({**older, "config": "0" * 64}, now)
    assert not is_older_form(now, now)
    assert not is_older_form({k: v for k, v in now.items() if k != "config"}, now)


def test_a_hub_id_that_loads_the_embedded_copy_is_named_as_the_embedded_model(tmp_path, monkeypatch):
    """Offline, or without a Hub snapshot, an embedded model's Hub id loads the converted embedded copy
    (resolve_model_path, by the same rule): its identity names that copy, not the Hub repository (was: the Hub id
    alone, so a study resumed online with the Hub's weights mixed two models)."""
    from rope_adapter.embedded.naming import embedded_source
    from rope_adapter.embedded.registry import DEFAULT_MODEL, EMBEDDED_MODELS

    spec = EMBEDDED_MODELS[DEFAULT_MODEL]
    hub = HubCache(tmp_path / "hf-cache", spec.hub_id, monkeypatch)  # offline
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    copy = {"embedded": spec.name, "gguf_sha256": spec.gguf_sha256}
    assert model_identity(spec.hub_id) == copy  # offline, no snapshot
    hub.publish(save_model_folder(tiny_model("llama", num_layers=2), tmp_path / "snapshot"), "d" * 40)
    assert model_identity(spec.hub_id) == copy  # offline: the embedded copy is loaded all the same
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert embedded_source(spec.hub_id) is None  # online with a snapshot: the Hub's model, named by its commit
    shutil.rmtree(hub.folder / "snapshots")
    assert model_identity(spec.hub_id) == copy  # online without a snapshot: the embedded copy
    assert model_identity(str(tmp_path / "snapshot")) != copy  # a local folder is never the embedded copy


class _Stderr:
    """A stderr that is a terminal or not (a log file), so that tqdm's ``disable=None`` shows the bar or not."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.text = ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_hashing_large_weights_shows_progress_on_a_terminal_only(folder, monkeypatch):
    import rope_adapter.identity as identity

    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    before = model_identity(str(folder))
    for threshold, tty, shown in ((size + 1, True, False), (size, True, True), (size, False, False)):
        monkeypatch.setattr(identity, "PROGRESS_BYTES", threshold)
        stderr = _Stderr(tty)
        monkeypatch.setattr(identity.sys, "stderr", stderr)
        assert model_identity(str(folder)) == before  # the bar changes nothing it names
        assert (f"hashing {folder.name}'s weights" in stderr.text) is shown
