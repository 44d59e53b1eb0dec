"""Push publishes exactly the files an adapter or exported model needs: never through a link, never a subfolder,
never a search report or a note; the CLI lists what goes up (and what stays) before it uploads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from testkit.card_folders import make_adapter, make_export
from testkit.hub_server import HubTestServer, hub_for_test

from rope_adapter.cli import main
from rope_adapter.export.card import CardError, read_folder
from rope_adapter.export.hub import push_folder

TOKEN = HubTestServer.DEFAULT_TOKEN


@pytest.fixture
def hub(tmp_path, monkeypatch):
    yield from hub_for_test(tmp_path, monkeypatch)


def _crowded_adapter(tmp_path: Path) -> Path:
    """An adapter folder with what users leave beside it: a link to a secret, an exported model inside it, a search
    report copied in (worker host:pid, a local storage path) and a note."""
    folder = make_adapter(tmp_path / "adapter")
    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=do-not-publish\n")
    os.symlink(secret, folder / "notes.txt")
    make_export(folder / "exported")
    (folder / "search_report.json").write_text(
        json.dumps({"study": {"storage": f"sqlite:///{tmp_path}/study.db"}, "trials": [{"worker": "host:123"}]})
    )
    (folder / "todo.md").write_text("private notes\n")
    return folder


def test_only_the_adapter_files_are_published(hub, tmp_path):
    folder = _crowded_adapter(tmp_path)
    info = read_folder(folder)
    assert set(info.files) == {
        "README.md",  # PEFT's; push uploads a card generated in its place
        "adapter_config.json",
        "adapter_model.safetensors",
        "results.json",
        "results_table.json",
        "factors.png",
    }
    assert any(x.startswith("notes.txt (a link") for x in info.left_out)
    assert any(x.startswith("exported/ (a folder") for x in info.left_out)
    assert any(x.startswith("search_report.json") for x in info.left_out)
    push_folder(folder, "org/crowded", token=TOKEN)
    published = hub.files("org/crowded")
    assert set(published) == {".gitattributes", *info.files}
    everything = b"".join(published.values())
    assert b"do-not-publish" not in everything and b"host:123" not in everything
    assert str(tmp_path).encode() not in everything


def test_an_exported_model_publishes_its_code_weights_and_sidecar(tmp_path):
    folder = make_export(tmp_path / "model")
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    (folder / "helper.py").write_text("# not named by auto_map\n")
    files = set(read_folder(folder).files)
    published = {"config.json", "configuration_llama_lrs.py", "modeling_llama_lrs.py", "model.safetensors"}
    assert published | {"lrs_export.json"} <= files
    assert "helper.py" not in files


def test_a_linked_adapter_file_is_refused(tmp_path):
    folder = make_adapter(tmp_path / "adapter", results=False)
    real = tmp_path / "elsewhere.safetensors"
    (folder / "adapter_model.safetensors").rename(real)
    os.symlink(real, folder / "adapter_model.safetensors")
    with pytest.raises(CardError, match="adapter_model.safetensors must be a regular file"):
        read_folder(folder)


def test_push_lists_the_files_first_and_a_dry_run_uploads_nothing(hub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    folder = _crowded_adapter(tmp_path)
    assert main(["push", str(folder), "--repo", "org/dry", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would upload to org/dry: README.md (generated), adapter_config.json" in out
    assert "left out: " in out and "notes.txt (a link: never followed)" in out
    assert not hub.repo_exists("org/dry")  # nothing was sent: no repo, and no write request of any kind
    assert not [r for r in hub.requests if r[0] in {"POST", "PUT", "DELETE"}]
