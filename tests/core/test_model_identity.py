"""A model is named by everything in it that changes a score (:func:`rope_adapter.identity.model_identity`): every
file of a model folder but Markdown and hidden files, and a Hub model by its commit; what earlier releases recorded
(the older forms) still matches the same model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from testkit.hub_cache import HubCache
from testkit.tiny_models import save_model_folder, tiny_model

from rope_adapter.identity import is_older_form, model_identity

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
    assert set(before) == {"folder", "config", "weights", "files"}
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    assert {"config.json", "model.safetensors", "tokenizer.json", *EXTRA_FILES} <= set(names)
    for i, name in enumerate(names):
        edited = _edited(folder, tmp_path / str(i), name)
        same = model_identity(str(edited)) == before
        assert same == (name in NOT_SCORED), name


def test_older_forms_match_the_same_model_only(folder, tmp_path, monkeypatch):
    now = model_identity(str(folder))
    older = {k: v for k, v in now.items() if k != "files"}
    assert is_older_form(older, now) and not is_older_form(now, older)
    other = model_identity(str(_edited(folder, tmp_path, "model.safetensors")))
    assert not is_older_form(older, other) and not is_older_form(now, other)
    hub = HubCache(tmp_path / "hf-cache", "org/tiny", monkeypatch)
    hub.publish(folder, "c" * 40)
    named = model_identity(hub.repo)
    assert named == {"hub": hub.repo, "revision": "c" * 40}
    assert is_older_form(hub.repo, named) and not is_older_form("org/other", named)
    assert model_identity("org/not-cached") == "org/not-cached"  # cannot be resolved: the name, as before
