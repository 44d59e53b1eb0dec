"""Where a benchmark's result set is written (imported by the scripts beside it).

Each result set is one folder under ``benchmarks/results/``; its summary is ``<folder>/<folder name>.json`` and
``.md`` (a study, adapter or plots the script also writes go into the same folder). The name is joined, not given
a suffix with ``Path.with_suffix``: names such as ``tf_accuracy_qwen2.5-coder-0.5b-instruct_50pairs`` hold dots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rope_adapter import files

RESULTS = Path(__file__).resolve().parent / "results"
"""The folder of every result set."""


def result_file(folder: Path, suffix: str) -> Path:
    """``<folder>/<folder name><suffix>``: a result set's summary file (``suffix`` ".json" or ".md")."""
    return folder / f"{folder.name}{suffix}"


def write_summary(folder: Path, data: Any, markdown: str, **json_options: Any) -> tuple[Path, Path]:
    """Write a result set's JSON (``json_options`` go to :func:`rope_adapter.files.write_json`) and Markdown into
    ``folder`` (made if missing), print the Markdown and the two paths, and return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = result_file(folder, ".json"), result_file(folder, ".md")
    files.write_json(json_path, data, **json_options)
    files.write_text(md_path, markdown)
    print(markdown)
    print(f"wrote {json_path} and {md_path}")
    return json_path, md_path
