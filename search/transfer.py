"""Start a study from another study's trials: :func:`copy_trials` (to go on with another sampler, or after a change
of the sampler range, without paying again for the trials that were already scored).

The source study must have been made with the same settings (the fingerprint of :mod:`search.fingerprint`) apart from
the sampler and the sampler range of the end control ys (``endpoint_margin``); only those change what is
*proposed*, never what a trial *scores*. A trial is copied when it finished (COMPLETE) and its parameters lie in
the new study's sampler ranges; its values, constraint values and every attribute go with it, plus
``copied_from`` (source study and trial number). Baselines not among the copies are enqueued as usual.

Example: ``copy_trials(SearchSettings.flat(..., sampler="gp", out="new"), "sqlite:///old/study.db", "lrs-search")``, then
``run_search`` (or ``rope-adapter search``) with the same settings resumes the new study.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from .fingerprint import fingerprint_differences, read_stored_fingerprint, study_fingerprint
from .outputs import check_writable
from .quiet import quiet_optuna
from .samplers import DEFAULT_SAMPLER
from .settings import SearchError, SearchSettings, redact_url
from .storage import BASELINE_ATTR, SETTINGS_ATTR, baseline_params
from .storage_url import open_storage

COPIED_ATTR = "copied_from"
"""Trial user attribute of a copied trial: ``{"study": name, "trial": number}`` in the source study."""

MAY_DIFFER = ("sampler", "space.endpoint_margin")
"""Fingerprint entries that may differ between the source and the new study (they change proposals, not scores)."""


def copy_trials(settings: SearchSettings, source_storage: str, source_study: str, dtype: str = "float32") -> dict:
    """Create the study ``settings.study.name`` in ``settings.storage_url()`` holding the finished trials of ``source_study``
    (in ``source_storage``) that fit the new sampler ranges, then the baselines the copies lack.

    Returns ``{"copied": n, "skipped": [trial numbers], "enqueued": [uniform values]}``. Refuses (:class:`SearchError`,
    nothing written) a target study that exists, or a source made with other settings.
    """
    if settings.study.sampler is None:  # the target is a new study
        settings = settings.updated(sampler=DEFAULT_SAMPLER)
    fingerprint = study_fingerprint(settings, dtype)
    target_url = settings.storage_url()
    with quiet_optuna():
        source = optuna.load_study(
            study_name=source_study, storage=open_storage(source_storage, settings.study.heartbeat)
        )
        stored = read_stored_fingerprint(source.user_attrs.get(SETTINGS_ATTR), fingerprint)
        if stored is None:
            raise SearchError(f"study {source_study!r} holds no rope-adapter search settings: nothing to copy from")
        diff = [d for d in fingerprint_differences(stored, fingerprint) if not d.startswith(MAY_DIFFER)]
        if diff:
            raise SearchError(
                f"study {source_study!r} was made with other settings ({'; '.join(diff)}): its trials scored "
                "something else and cannot be copied"
            )
        if settings.study.storage is None:
            check_writable(Path(settings.out))
        storage = open_storage(target_url, settings.study.heartbeat)
        if settings.study.name in optuna.get_all_study_names(storage):
            raise SearchError(
                f"study {settings.study.name!r} exists in {redact_url(target_url)}: copy trials only into a new study"
            )
        space = settings.space.bezier()
        distributions = {
            name: optuna.distributions.FloatDistribution(low, high)
            for name, (low, high) in space.param_bounds().items()
        }
        trials, skipped = [], []
        for old in source.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            params = dict(old.params)
            if set(params) != set(distributions) or not all(distributions[k]._contains(v) for k, v in params.items()):
                skipped.append(old.number)
                continue
            trials.append(
                optuna.trial.create_trial(
                    state=optuna.trial.TrialState.COMPLETE,
                    params=params,
                    distributions=distributions,
                    values=old.values,
                    user_attrs={**old.user_attrs, COPIED_ATTR: {"study": source_study, "trial": old.number}},
                    system_attrs=dict(old.system_attrs),
                )
            )
        study = optuna.create_study(storage=storage, study_name=settings.study.name, directions=source.directions)
        study.set_user_attr(SETTINGS_ATTR, fingerprint)
        if source.metric_names:
            study.set_metric_names(list(source.metric_names))
        study.add_trials(trials)
        have = {float(t.user_attrs.get("uniform")) for t in trials if t.user_attrs.get(BASELINE_ATTR) is not None}
        enqueued = []
        wanted = ([1.0] if space.s_min <= 1.0 <= space.s_max else []) + settings.uniform_values()
        for value in wanted:
            if value in have:
                continue
            kind = "base" if value == 1.0 else "uniform"
            study.enqueue_trial(baseline_params(space, value), user_attrs={BASELINE_ATTR: kind, "uniform": value})
            enqueued.append(value)
    return {"copied": len(trials), "skipped": skipped, "enqueued": enqueued}
