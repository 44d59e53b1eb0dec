"""Fixtures of the export tests: one working folder and one tiny Llama base with a non-uniform adapter per module."""

from __future__ import annotations

from pathlib import Path

import pytest
from testkit.export_folders import NON_UNIFORM, make_adapter, make_base


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("export")


@pytest.fixture(scope="module")
def llama(work) -> tuple[Path, Path]:
    """(base folder, non-uniform adapter folder) of a tiny Llama."""
    return make_base(work / "base_llama"), make_adapter(work / "adapter_llama", NON_UNIFORM)
