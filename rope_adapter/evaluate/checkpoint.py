"""An interrupted ``eval`` resumes where it stopped.

Each variant is scored a part at a time (:func:`record_parts`: consecutive records, a multiple of the batch size, so
the forward passes are those of one pass over every record when a record's samples share one prefix, as in
key-value retrieval: the scores are the same), and every finished part is kept in ``--out``/:data:`PROGRESS_NAME`
(written atomically). Run the same command again and the
kept parts are read back instead of scored; a Ctrl-C, a kill or a stopped machine loses at most the part that was
running. The file belongs to one run: it is used only when the run's identity (model by what it holds, dtype,
device, task, every sample's tokens, scores, batching and the releases of rope-adapter, torch, transformers and
PEFT) and the variant's (its spec and factors) are the same,
else the run starts afresh; it is removed once ``results.json`` is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from rope_adapter import files
from rope_adapter.records import read_json
from rope_adapter.scoring.results_table import finite
from rope_adapter.scoring.shared_prefix import TokenizedTask

PROGRESS_NAME = "eval_progress.json"
PROGRESS_STAMP = "rope-adapter eval"
"""The ``written_by`` value of :data:`PROGRESS_NAME`."""
PART_RECORDS = 8
"""Records per part, at least: a part holds the smallest multiple of the batch size that reaches this."""


class PartScores(TypedDict):
    """One part's scores of one variant, per sample of the part in sample order."""

    scores: dict[str, list[float]]  # metric -> value per sample
    predictions: list[str] | None  # greedy answers (score "accuracy")
    seconds: float


class ProgressFile(TypedDict):
    """``eval_progress.json``: the parts finished so far, per variant."""

    written_by: str  # PROGRESS_STAMP
    run: str  # sha256 of the run's identity
    parts: int  # parts per variant
    variants: dict[str, list[PartScores]]  # variant key -> its finished parts, in order


def digest(value: Any) -> str:
    """sha256 of ``value`` as canonical JSON."""
    return hashlib.sha256(files.dumps_json(value, where="a run's identity", sort_keys=True).encode()).hexdigest()


def samples_digest(task: TokenizedTask) -> str:
    """What the samples are: each one's record, gold position and tokens (prompt and answer rows)."""
    return digest(
        [[s.record_id, int(s.position)] for s in task.samples] + [list(ids) for ids in task.full_ids] + task.prompt_ids
    )


def record_parts(task: TokenizedTask, batch_size: int) -> list[list[int]]:
    """Sample indices of each part: records in the order they first appear, ``k * batch_size >= PART_RECORDS``
    of them per part (the last may hold fewer), each sample with its record."""
    records: dict[str, list[int]] = {}
    for i, sample in enumerate(task.samples):
        records.setdefault(sample.record_id, []).append(i)
    per_part = batch_size * max(1, -(-PART_RECORDS // batch_size))
    groups = list(records.values())
    return [sorted(i for g in groups[j : j + per_part] for i in g) for j in range(0, len(groups), per_part)]


def valid_parts(parts: Any, sizes: Sequence[int]) -> bool:
    """Whether ``parts`` is a list of :class:`PartScores` as :meth:`Checkpoint.keep` writes them for parts of
    ``sizes`` samples: the same metrics in every part, one finite number per sample, one answer per sample."""
    if not isinstance(parts, list) or len(parts) > len(sizes):
        return False
    metrics: set[str] | None = None
    for part, size in zip(parts, sizes, strict=False):
        if not isinstance(part, dict) or set(part) != {"scores", "predictions", "seconds"}:
            return False
        scores, predictions, seconds = part["scores"], part["predictions"], part["seconds"]
        if not isinstance(scores, dict) or not scores or (metrics is not None and set(scores) != metrics):
            return False
        metrics = set(scores)
        for values in scores.values():
            if not isinstance(values, list) or len(values) != size or not all(finite(v) is not None for v in values):
                return False
        if (
            (predictions is None) != ("accuracy" not in scores)
            or predictions is not None
            and (
                not isinstance(predictions, list)
                or len(predictions) != size
                or not all(isinstance(t, str) for t in predictions)
            )
        ):
            return False
        if finite(seconds) is None or seconds < 0:
            return False
    return True


class Checkpoint:
    """The finished parts of one run, kept in ``out``/:data:`PROGRESS_NAME`.

    Args:
        out: the run's ``--out`` folder (made by the first :meth:`keep` when missing).
        run: what identifies the run (:func:`digest` of it is compared with the file's).
        sizes: samples per part, in order (``len(sizes)`` parts per variant).

    A file of this run whose parts are not what this run writes (a damaged or hand-edited file) is stale too: it
    is never read back into the results.
    """

    def __init__(self, out: str | Path, run: Any, sizes: Sequence[int]) -> None:
        self.path = Path(out).expanduser() / PROGRESS_NAME
        self.run = digest(run)
        self.sizes = [int(n) for n in sizes]
        self.parts = len(self.sizes)
        self.variants: dict[str, list[PartScores]] = {}
        self.stale = False  # a progress file of another run (or unreadable) was found; it is replaced
        if self.path.is_file():
            try:
                data = read_json(self.path)
            except (OSError, ValueError):
                data = None
            if (
                isinstance(data, dict)
                and data.get("written_by") == PROGRESS_STAMP
                and data.get("run") == self.run
                and data.get("parts") == self.parts
                and isinstance(data.get("variants"), dict)
                and all(valid_parts(v, self.sizes) for v in data["variants"].values())
            ):
                self.variants = {k: list(v) for k, v in data["variants"].items()}
            else:
                self.stale = True

    @staticmethod
    def variant_key(name: str, spec: str, described: Any) -> str:
        """A variant by its name, spec and built RoPE settings and factors."""
        return digest([name, spec, described])

    def done(self, key: str) -> list[PartScores]:
        """The finished parts of variant ``key``, in order."""
        return list(self.variants.get(key, []))[: self.parts]

    def keep(self, key: str, part: PartScores) -> None:
        """Add variant ``key``'s next finished part and write the file (atomically)."""
        self.variants.setdefault(key, []).append(part)
        record: ProgressFile = {
            "written_by": PROGRESS_STAMP,
            "run": self.run,
            "parts": self.parts,
            "variants": self.variants,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        files.write_json(self.path, record)

    def remove(self) -> None:
        """Remove the file (the run's results are written)."""
        self.path.unlink(missing_ok=True)


def kept_parts_line(checkpoint: Checkpoint, key: str, name: str) -> str | None:
    """The log line of a variant that resumes from kept parts, else None."""
    done = len(checkpoint.done(key))
    if not done:
        return None
    return f"    {name}: {done} of {checkpoint.parts} parts kept in {checkpoint.path.name}, resuming after them"
