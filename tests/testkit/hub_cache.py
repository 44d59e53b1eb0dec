"""A model folder served as a Hub repository from a local Hugging Face cache (offline: the tests never reach a hub),
with its default branch moved to another commit on demand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


class HubCache:
    """A Hugging Face cache under ``root`` in which ``repo`` (``org/name``) holds snapshots of model folders."""

    def __init__(self, root: Path, repo: str, monkeypatch: pytest.MonkeyPatch) -> None:
        import huggingface_hub.constants as constants

        self.repo = repo
        self.folder = root / f"models--{repo.replace('/', '--')}"
        (self.folder / "refs").mkdir(parents=True)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def publish(self, model_folder: Path, commit: str) -> str:
        """``model_folder`` as commit ``commit`` (40 hex digits), which the default branch now points to."""
        shutil.copytree(model_folder, self.folder / "snapshots" / commit)
        (self.folder / "refs" / "main").write_text(commit)
        return commit
