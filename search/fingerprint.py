"""A study's fingerprint: the settings that define its trials, stored in the study and compared when it resumes.

Models and data files are named by what they hold (a folder's name, its config's sha256 and a cheap weights
fingerprint), not by their local path, so that machines with other paths to the same model can share a study.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

from rope_adapter.files import dumps_json
from rope_adapter.identity import (
    FileIdentity,
    FolderIdentity,
    HubIdentity,
    file_identity,
    is_older_form,
    model_identity,
)
from rope_adapter.json_types import JsonObject

from .racing import stage_ends
from .samplers import LEGACY_SAMPLER
from .settings import SearchSettings

FINGERPRINT_VERSION = 2


class PerplexityGuard(TypedDict):
    """The perplexity guard's settings in a fingerprint."""

    text: FileIdentity | str  # "built-in" for the built-in text
    max_increase: float
    windows: int
    window_chars: int


class SpaceFingerprint(TypedDict):
    """The Bezier space's settings in a fingerprint."""

    degree: int
    x_mode: str
    s_min: float
    s_max: float
    margin: float
    endpoint_margin: bool


class RaceFingerprint(TypedDict):
    """Racing's stages in a fingerprint."""

    ends: list[int]
    z: float


class StudyFingerprint(TypedDict):
    """What :func:`study_fingerprint` writes and a study stores (its JSON keys); a study made by an older version
    may lack ``space.endpoint_margin`` and ``sampler`` (:func:`read_stored_fingerprint` fills them)."""

    version: int
    model: FolderIdentity | HubIdentity | str
    tokenizer: FolderIdentity | HubIdentity | str | None
    dtype: str
    task: str
    data: FileIdentity | None
    pairs: int | list[int]
    positions: list[int] | None
    num_positions: int | None
    task_options: JsonObject
    search_records: int
    holdout_records: int
    data_seed: int
    chat_template: bool
    score: str
    k: int | None
    objective: str
    position_weights: list[float] | None
    worst_weight: float
    space: SpaceFingerprint
    layer_bounds: list[str]
    max_step: float | None
    user_constraints: list[str]
    uniform: list[float]
    perplexity: PerplexityGuard | None
    race: RaceFingerprint
    sampler: str


def study_fingerprint(settings: SearchSettings, dtype: str) -> StudyFingerprint:
    """The settings that define a study's trials; a study is resumed only with equal ones."""
    ppl: PerplexityGuard | None = None
    if settings.space.max_ppl_increase is not None:
        ppl = {
            "text": file_identity(settings.space.ppl_text) if settings.space.ppl_text else "built-in",
            "max_increase": settings.space.max_ppl_increase,
            "windows": settings.space.ppl_windows,
            "window_chars": settings.space.ppl_window_chars,
        }
    return {
        "version": FINGERPRINT_VERSION,
        "model": model_identity(settings.model.name),
        "tokenizer": None if settings.model.tokenizer is None else model_identity(settings.model.tokenizer),
        "dtype": dtype,
        "task": settings.task.name,
        "data": file_identity(settings.task.data) if settings.task.data else None,
        "pairs": settings.task.pairs if isinstance(settings.task.pairs, int) else list(settings.task.pairs),
        "positions": None if settings.task.positions is None else list(settings.task.positions),
        "num_positions": settings.task.num_positions,
        "task_options": json.loads(
            dumps_json(settings.task.other_options(), where="task_options", sort_keys=True, default=str)
        ),
        "search_records": settings.search_records,
        "holdout_records": settings.holdout_records,
        "data_seed": settings.task.seed,
        "chat_template": settings.task.chat_template == "on",
        "score": settings.objective.score,
        "k": settings.objective.k,
        "objective": settings.objective.kind,
        "position_weights": None
        if settings.objective.position_weights is None
        else list(settings.objective.position_weights),
        "worst_weight": settings.objective.worst_weight,
        "space": {
            "degree": settings.space.degree,
            "x_mode": settings.space.x_mode,
            "s_min": settings.space.s_min,
            "s_max": settings.space.s_max,
            "margin": settings.space.margin,
            "endpoint_margin": settings.space.endpoint_margin,
        },
        "layer_bounds": [str(b) for b in settings.parsed_layer_bounds()],
        "max_step": settings.space.max_step,
        "user_constraints": [
            f"{getattr(c, '__module__', '?')}.{getattr(c, '__qualname__', repr(c))}" for c in settings.space.constraints
        ],
        "uniform": settings.uniform_values(),
        "perplexity": ppl,
        "race": {"ends": stage_ends(settings.search_records, settings.study.race), "z": settings.study.race_z},
        "sampler": _named_sampler(settings),
    }


def _named_sampler(settings: SearchSettings) -> str:
    if settings.study.sampler is None:
        raise ValueError("the settings name no sampler yet: pass them through resolve_sampler(settings, storage)")
    return settings.study.sampler


def read_stored_fingerprint(stored: Any, current: Any = None) -> Any:
    """A fingerprint as a study stored it, with the values a study made before ``endpoint_margin`` existed (its end
    ys were widened) or before the sampler was a setting (NSGA-II) was made with; committed studies of both kinds
    resume with these. A model identity stored in an older form is completed from the ``current`` fingerprint's
    (a Hub model by its name alone: the commit; a model folder without ``files``: those), so such a study resumes
    too."""
    if isinstance(stored, dict) and isinstance(stored.get("space"), dict) and "endpoint_margin" not in stored["space"]:
        stored = {**stored, "space": {**stored["space"], "endpoint_margin": True}}
    if isinstance(stored, dict) and "sampler" not in stored:
        stored = {**stored, "sampler": LEGACY_SAMPLER}
    if isinstance(stored, dict) and isinstance(current, dict):
        for key in ("model", "tokenizer"):
            if is_older_form(stored.get(key), current.get(key)):
                stored = {**stored, key: current[key]}
    return stored


def fingerprint_differences(stored: Any, current: Any, prefix: str = "") -> list[str]:
    """One line per entry that differs between a stored and a current fingerprint (nested entries as ``a.b``)."""
    if isinstance(stored, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(stored) | set(current)):
            out += fingerprint_differences(stored.get(key), current.get(key), f"{prefix}{key}.")
        return out
    return [] if stored == current else [f"{prefix.rstrip('.')}: {stored!r} in the study, {current!r} now"]
