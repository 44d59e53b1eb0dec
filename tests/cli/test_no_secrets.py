"""Issue 18, item 2: search, eval, export, card and push (to the test Hub) run with ``HF_TOKEN`` set and, where a
PostgreSQL server is given, a storage URL with a password; then every file they wrote and every file the Hub
received is searched for the token, the password and absolute local paths.

What a user keeps on their own disk may name their own folders (the study records the model folder it resumes
with; PEFT's ``adapter_config.json`` names the base folder it loads); what is published names none, and no file
anywhere holds the token or the password."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from testkit.hub_server import HubTestServer, hub_for_test

from rope_adapter.cli import main

TOKEN = HubTestServer.DEFAULT_TOKEN
POSTGRES_URL = os.environ.get("ROPE_ADAPTER_TEST_POSTGRES_URL")
ABSOLUTE = re.compile(rb"(?<![\w.~<>-])/(?:work|root|home|tmp|Users|mnt|opt|var|private)/")


@pytest.fixture
def hub(tmp_path, monkeypatch):
    yield from hub_for_test(tmp_path, monkeypatch)


def _storage(request) -> tuple[str | None, str | None]:
    """(storage URL, its password): SQLite by default; the CI's PostgreSQL (whose URL has a password) when set."""
    if request.param == "sqlite":
        return None, None
    if not POSTGRES_URL:
        pytest.skip("ROPE_ADAPTER_TEST_POSTGRES_URL is not set (source .ci/postgres.sh)")
    from sqlalchemy.engine import make_url

    password = make_url(POSTGRES_URL).password
    assert password, "the test needs a storage URL with a password"
    return POSTGRES_URL, password


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage(request):
    return _storage(request)


def make_url_user(url: str) -> str:
    from sqlalchemy.engine import make_url

    return str(make_url(url).username)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _hits(files: dict[str, bytes], needles: list[bytes]) -> list[str]:
    return [f"{name}: {needle.decode()}" for name, data in files.items() for needle in needles if needle in data]


def test_nothing_written_or_published_holds_the_token_the_password_or_a_local_path(
    hub, tmp_path, tiny_llama_dir, monkeypatch, capsys, storage
):
    url, password = storage
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "search"
    study = f"secrets-{uuid.uuid4().hex[:8]}"
    search = ["search", "--model", str(tiny_llama_dir), "--pairs", "3", "--num-positions", "3",
              "--search-records", "2", "--holdout-records", "2", "--trials", "4", "--population", "2",
              "--s-min", "1.0", "--s-max", "1.5", "--uniform", "1.2", "--device", "cpu", "--no-progress",
              "--out", str(out), "--study", study]  # fmt: skip
    if url:
        search += ["--storage", url]
    assert main(search) == 0
    adapter = out / "adapter"
    assert main(["eval", "--model", str(tiny_llama_dir), "--adapter", str(adapter), "--num-pairs", "3",
                 "--positions", "0", "2", "--num-samples", "2", "--no-progress", "--out", str(tmp_path / "eval")]) == 0  # fmt: skip
    exported = tmp_path / "exported"
    assert main(["export", "--model", str(tiny_llama_dir), "--adapter", str(adapter), "--out", str(exported)]) == 0
    assert main(["card", str(adapter), "--repo", "org/lrs", "--out", str(tmp_path / "card.md")]) == 0
    assert main(["push", str(adapter), "--repo", "org/lrs"]) == 0
    assert main(["push", str(exported), "--repo", "org/lrs-exported"]) == 0
    printed = capsys.readouterr()

    secrets = [TOKEN.encode()] + ([password.encode()] if password else [])
    if url:  # the study is recorded by its public URL: no user name, no password
        from rope_adapter.search.settings import public_storage

        report = (out / "search_report.json").read_text()
        assert public_storage(url) in report and make_url_user(url) + "@" not in report
    written = {
        f"{top.name}/{name}": data for top in (out, tmp_path / "eval", exported) for name, data in _files(top).items()
    }
    written["card.md"] = (tmp_path / "card.md").read_bytes()
    published = {
        f"{repo}/{name}": data for repo in ("org/lrs", "org/lrs-exported") for name, data in hub.files(repo).items()
    }
    assert {"org/lrs/adapter_model.safetensors", "org/lrs/README.md", "org/lrs-exported/config.json"} <= set(published)

    assert _hits(written, secrets) == []
    assert _hits(published, secrets) == []
    assert not any(s.decode() in printed.out + printed.err for s in secrets)
    local = [str(tmp_path).encode(), str(tmp_path.resolve()).encode(), str(tiny_llama_dir).encode()]
    assert _hits(published, local) == []
    assert [name for name, data in published.items() if ABSOLUTE.search(data)] == []
    # the cards written locally are the ones published: no path of the user's either (their own results.json,
    # search report, study and PEFT's adapter_config.json may name their folders: they stay on their disk)
    cards = {k: v for k, v in written.items() if k.endswith("README.md") or k == "card.md"}
    assert len(cards) >= 2 and _hits(cards, local) == []


def test_reports_and_cards_record_a_storage_url_without_user_or_password():
    from rope_adapter.search.settings import public_storage, redact_url

    url = "postgresql+psycopg2://someone:s3cret@db.example:5432/studies"
    assert public_storage(url) == "postgresql+psycopg2://db.example:5432/studies"
    assert redact_url(url) == "postgresql+psycopg2://someone@db.example:5432/studies"  # messages to the user
    assert public_storage("sqlite:////home/me/runs/study.db") == "sqlite:///study.db"
    assert public_storage("postgresql://db.example/studies") == "postgresql://db.example/studies"
