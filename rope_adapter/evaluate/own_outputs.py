"""`eval` and `analyze` replace only their own outputs in ``--out`` (README, Errors: no command overwrites a file
it did not write unless told to).

A folder holds a command's outputs when its record says so: ``results.json`` of a sweep (its ``kind``) or the
progress file of an interrupted run (stamped ``written_by``) for ``eval``, ``analysis.md`` (its heading) or a JSON part stamped ``written_by`` for ``analyze``. A folder that holds
any file the command would write, without such a record, is refused before any work, naming the files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rope_adapter.records import read_json
from rope_adapter.scoring.loading import EvalError

from .checkpoint import PROGRESS_NAME, PROGRESS_STAMP

EVAL_OUTPUTS = ("results.json", "results.md", "results_table.json", "positions.png", "lengths.png", PROGRESS_NAME)
SWEEP_KINDS = ("positions", "lengths")
ANALYZE_OUTPUTS = (
    "analysis.md",
    "decay.json",
    "decay.png",
    "attention.json",
    "attention.png",
    "sensitivity.json",
    "sensitivity.png",
)
ANALYZE_STAMP = "rope-adapter analyze"
"""The ``written_by`` value of every JSON part `analyze` writes."""
ANALYSIS_HEADING = "# Analysis of "


def _json(path: Path) -> Any:
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def eval_wrote(out: Path) -> bool:
    if (out / "results.json").exists() or (out / "results.json").is_symlink():  # it decides when present
        data = _json(out / "results.json")
        return isinstance(data, dict) and data.get("kind") in SWEEP_KINDS and isinstance(data.get("variants"), list)
    progress = _json(out / PROGRESS_NAME)
    return isinstance(progress, dict) and progress.get("written_by") == PROGRESS_STAMP


def analyze_wrote(out: Path) -> bool:
    try:
        with open(out / "analysis.md", encoding="utf-8", errors="replace") as handle:
            if handle.readline().startswith(ANALYSIS_HEADING):
                return True
    except OSError:
        pass
    parts = (_json(out / name) for name in ANALYZE_OUTPUTS if name.endswith(".json"))
    return any(isinstance(d, dict) and d.get("written_by") == ANALYZE_STAMP for d in parts)


def check_own_outputs(out: str | Path, outputs: Sequence[str], wrote: Callable[[Path], bool], command: str) -> None:
    """:class:`EvalError` when ``out`` holds one of ``outputs`` that ``command`` did not write (``wrote(out)``
    is False); a link in their place counts as present."""
    out = Path(out).expanduser()
    present = [n for n in outputs if (out / n).exists() or (out / n).is_symlink()]
    if present and not wrote(out):
        raise EvalError(
            f"--out {out} holds {', '.join(present)}, which `rope-adapter {command}` did not write (or which no "
            "longer say so: damaged): it replaces only its own outputs; choose another --out, or move those files away"
        )
