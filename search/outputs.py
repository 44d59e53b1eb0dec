"""Which files in a search's ``out`` folder the search writes, and the check that it replaces only its own.

A search (and a resumed one) writes :data:`OUTPUT_NAMES` into ``out``: :func:`check_writable` first makes sure
it can, and :func:`output_errors` turns a failed write into one line. Before any work, :func:`check_own_outputs`
refuses an ``out`` where one of them exists but was not written by this study: the report and the adapter name
the study (name and storage) that wrote them, so a folder another run or the user wrote is never overwritten.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from rope_adapter.records import read_json
from rope_adapter.writable import unwritable_reason

from .settings import SearchError, SearchSettings, public_storage

REPORT_NAME = "search_report.json"
SUMMARY_NAME = "search_report.md"
OUTPUT_NAMES = ("adapter", REPORT_NAME, SUMMARY_NAME, "pareto.png", "factors.png", "positions.png")
"""What a search writes in ``out`` (besides its default ``study.db``)."""


def _study_of(path: Path, *keys: str) -> tuple[str | None, str | None] | None:
    """(study name, storage) recorded under ``keys`` in the JSON file ``path``; None when unreadable."""
    try:
        data = read_json(path)
        for key in keys:
            data = data[key]
        storage = data.get("storage")
        return data.get("name"), public_storage(storage) if isinstance(storage, str) else storage
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def check_own_outputs(settings: SearchSettings) -> None:
    """:class:`SearchError` when ``out`` holds a search output that this study (name and storage) did not write."""
    out = Path(settings.out)
    present = [name for name in OUTPUT_NAMES if (out / name).exists() or (out / name).is_symlink()]
    if not present:
        return
    ours = (settings.study.name, public_storage(settings.storage_url()))
    writers = {
        "report": _study_of(out / REPORT_NAME, "study"),
        "adapter": _study_of(out / "adapter" / "adapter_config.json", "provenance", "study"),
    }
    recorded = [w for w in writers.values() if w is not None]
    if any(w != ours for w in recorded) or not recorded:
        who = (
            "no search report or adapter that names the study which wrote them"
            if not recorded
            else "outputs of study " + ", ".join(f"{n!r} in {s}" for n, s in sorted(set(recorded), key=str))
        )
        raise SearchError(
            f"--out {out} holds {', '.join(present)} ({who}), not this study's ({settings.study.name!r} in {ours[1]}): "
            "a search replaces only its own outputs; choose another --out, or move those files away"
        )
    if (out / "adapter").exists() and writers["adapter"] is None:
        raise SearchError(
            f"--out {out} holds an adapter/ folder this search did not write (no provenance naming study "
            f"{settings.study.name!r}): choose another --out, or move it away"
        )


def check_writable(out: Path) -> None:
    """Create ``out`` (if needed) once a file can be written and flushed there: :class:`SearchError` naming the
    folder otherwise (a file in the way, a read-only or full disk)."""
    why = unwritable_reason(out, "the output folder")
    if why is None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            why = f"the output folder {out} cannot be made ({exc.strerror or exc})"
    if why is not None:
        raise SearchError(f"cannot write into the output folder: {why}; choose another --out") from None


@contextlib.contextmanager
def output_errors(out: Path) -> Iterator[None]:
    """An ``OSError`` while writing a search's outputs (a full or read-only disk) as one :class:`SearchError`; the
    trials are in the study storage already, so the same command resumes and writes the outputs again."""
    try:
        yield
    except OSError as exc:
        raise SearchError(
            f"cannot write the search outputs into {str(out)!r}: {exc.strerror or exc}; free some space (or make "
            "the folder writable) and rerun the same command: the finished trials are kept in the study"
        ) from exc
