"""A study's life in its storage: created once with its settings and baselines, resumed only with equal settings.

A study is created with its fingerprint (:mod:`search.fingerprint`) in ``user_attrs`` (:data:`SETTINGS_ATTR`) and
its baselines enqueued as its first trials; a study that exists is resumed only with an equal fingerprint, and an
enqueued trial that an interrupted run left failed is enqueued again (:func:`rerun_interrupted`).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna

from rope_adapter.json_types import JsonValue

from .bezier import BezierSpace
from .fingerprint import StudyFingerprint, fingerprint_differences, read_stored_fingerprint
from .samplers import DEFAULT_SAMPLER
from .settings import SearchError, SearchSettings
from .storage_url import MAX_RETRIES

SETTINGS_ATTR = "rope_adapter_search"
"""Study user attribute holding the settings a study was made with (compared when a study is resumed)."""
TRIAL_ATTR = "lrs"
"""Trial user attribute holding everything a trial computed (factors, scores, constraints, timing)."""
BASELINE_ATTR = "baseline"
"""User attribute of the enqueued baseline trials: ``"base"`` or ``"uniform"``."""
RERUN_ATTR = "rerun_of"
"""User attribute of a trial enqueued again by :func:`rerun_interrupted`: the number of the failed trial it repeats."""
MAX_RERUNS = MAX_RETRIES
"""How often an enqueued trial's parameters are run again after failures (as Optuna's heartbeat retries them)."""


def resolve_sampler(settings: SearchSettings, storage: Any) -> SearchSettings:
    """``settings`` with its sampler named: the one it gives; else the one the study ``settings.study`` in
    ``storage`` was made with (NSGA-II for a study made before the sampler was a setting), so that a study resumes
    with the command that made it; else :data:`~search.samplers.DEFAULT_SAMPLER` for a new study."""
    if settings.study.sampler is not None:
        return settings
    stored = None
    with contextlib.suppress(KeyError):
        study = optuna.load_study(study_name=settings.study.name, storage=storage)
        stored = read_stored_fingerprint(_wait_for_settings(study))
    sampler = stored.get("sampler") if isinstance(stored, dict) else None
    return settings.updated(sampler=sampler if isinstance(sampler, str) else DEFAULT_SAMPLER)


def _wait_for_settings(study: Any, seconds: float = 30.0) -> JsonValue:
    """The settings of a study another process has just created (it writes them right after creating it), as the
    study stores them (unchecked: read_stored_fingerprint and the comparison look at them); None when it has none."""
    deadline = time.monotonic() + seconds
    while True:
        stored = study.user_attrs.get(SETTINGS_ATTR)
        if stored is not None or time.monotonic() > deadline:
            return stored
        time.sleep(0.5)


DIFFERENCE_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("space.endpoint_margin",),
        "a study made before the first and last control ys were kept within [s_min, s_max] resumes with "
        "--endpoint-margin",
    ),
    (
        ("model.weights", "tokenizer.weights"),
        "the model folder has the same name and config but other weights than the study's: its trials scored "
        "another model",
    ),
    (
        ("model.files", "tokenizer.files"),
        "the model folder's tokenizer, chat template, generation config or code differ from the study's: its trials "
        "scored other prompts or another model",
    ),
    (
        ("model.gguf_sha256", "tokenizer.gguf_sha256"),
        "this release of rope-adapter ships the embedded model as another GGUF file than the one the study scored: "
        "its trials scored other weights; start a new --study",
    ),
    (
        ("model.revision", "tokenizer.revision"),
        "the Hub repository's default branch points to another commit than when the study started: its trials "
        "scored the earlier weights; start a new --study for the new ones",
    ),
    (
        ("num_positions",),
        "kv_retrieval now scores 25 gold positions per record by default, or every position of a shorter record; a "
        "study made with the earlier default resumes with --num-positions 5",
    ),
    (
        ("sampler",),
        "the sampler is part of a study: resume it with the sampler it was made with; to go on with another "
        "sampler, start a new --study and copy the old trials in with rope_adapter.search.copy_trials",
    ),
)
"""(fingerprint entries, what to tell the user) for a resumed study whose settings differ in those entries."""


def check_existing_study(storage: Any, name: str, fingerprint: StudyFingerprint) -> bool:
    """True when the study exists (with equal settings); :class:`SearchError` when it exists with others."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return False
    stored = _wait_for_settings(study)
    if stored is None:
        raise SearchError(
            f"study {name!r} exists in the storage but holds no rope-adapter search settings (made by another tool, "
            "or interrupted while being created); choose another --study, or delete it with "
            f"`optuna delete-study --study-name {name} --storage URL`"
        )
    diff = fingerprint_differences(read_stored_fingerprint(stored, fingerprint), fingerprint)
    if diff:
        hint = "".join(f" ({text})" for prefixes, text in DIFFERENCE_HINTS if any(d.startswith(prefixes) for d in diff))
        raise SearchError(
            f"study {name!r} exists with other settings ({'; '.join(diff)}); resume it with the same settings, "
            f"or start a new one with another --study (or --out){hint}"
        )
    return True


def baseline_params(space: BezierSpace, value: float) -> dict[str, float]:
    """Parameters of the constant curve ``value`` (all control ys equal; even xs in free mode)."""
    cp = np.stack([np.arange(space.degree + 1) / space.degree, np.full(space.degree + 1, float(value))], axis=1)
    return space.encode(cp)


def create_or_load_study(
    storage: Any,
    name: str,
    directions: Sequence[str],
    fingerprint: StudyFingerprint,
    space: BezierSpace,
    uniform: Sequence[float],
) -> bool:
    """Create the study with its settings and baselines, or check the existing one. True when it was created.

    Only the process that creates the study enqueues the baselines, so concurrent starters do not duplicate them.
    """
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=list(directions))
    except optuna.exceptions.DuplicatedStudyError:
        check_existing_study(storage, name, fingerprint)
        rerun_interrupted(optuna.load_study(study_name=name, storage=storage))
        return False
    study.set_user_attr(SETTINGS_ATTR, fingerprint)
    # named objective values for optuna-dashboard and study.trials_dataframe(): ObjectiveSpec.names
    study.set_metric_names(["mean", "worst"] if len(directions) == 2 else ["fitness"])
    if space.s_min <= 1.0 <= space.s_max:
        study.enqueue_trial(baseline_params(space, 1.0), user_attrs={BASELINE_ATTR: "base", "uniform": 1.0})
    for value in uniform:
        study.enqueue_trial(baseline_params(space, value), user_attrs={BASELINE_ATTR: "uniform", "uniform": value})
    return True


def _parameters(trial: optuna.trial.FrozenTrial) -> tuple[tuple[str, float], ...]:
    """The trial's parameters: its fixed ones while it waits (enqueued), else the ones it ran with."""
    fixed = trial.system_attrs.get("fixed_params") or trial.params
    return tuple(sorted(fixed.items()))


def rerun_interrupted(study: optuna.Study) -> list[int]:
    """Enqueue again each enqueued trial (a baseline, a retry) that failed and whose parameters no other trial has
    finished, runs or waits with.

    Ctrl-C, SIGTERM or a failed storage write mark the running trial FAIL, and Optuna's heartbeat retries only the
    trials of killed workers: without this a baseline interrupted once would be missing from the study for good.
    Searched trials are not repeated (the sampler proposes afresh). Parameters that failed more than
    :data:`MAX_RERUNS` times are not enqueued again, so a trial that fails on its own does not come back forever.
    Returns the numbers of the failed trials enqueued again.
    """
    trials = study.get_trials(deepcopy=False)
    settled = {_parameters(t) for t in trials if t.state != optuna.trial.TrialState.FAIL}
    failures = Counter(_parameters(t) for t in trials if t.state == optuna.trial.TrialState.FAIL)
    enqueued = []
    for trial in trials:
        fixed = trial.system_attrs.get("fixed_params")
        if trial.state != optuna.trial.TrialState.FAIL or not fixed:
            continue
        key = _parameters(trial)
        if key in settled or failures[key] > MAX_RERUNS:
            continue
        attrs = {k: v for k, v in trial.user_attrs.items() if k in (BASELINE_ATTR, "uniform")}
        study.enqueue_trial(dict(fixed), user_attrs={**attrs, RERUN_ATTR: trial.number})
        settled.add(key)
        enqueued.append(trial.number)
    return enqueued
