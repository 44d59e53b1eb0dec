"""Factor search: Bézier parameterisation, fitness tasks, scoring, and the Optuna study (``run_search``).

``from rope_adapter.search import SearchSettings, run_search`` runs a search; ``rope-adapter search`` is the
same from the command line. The heavy modules (torch, transformers, optuna) load only when their names are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rope_adapter.lazy import lazy_getattr

if TYPE_CHECKING:
    from .report_types import SearchReport
    from .settings import (
        ModelSettings,
        ObjectiveSettings,
        SearchError,
        SearchSettings,
        SpaceSettings,
        StudySettings,
        TaskSettings,
    )
    from .study import SearchResult, run_search
    from .transfer import copy_trials

_LAZY = {  # the public API, each name from the module that defines it
    "SearchError": ".settings",
    "SearchReport": ".report_types",
    "SearchResult": ".study",
    "SearchSettings": ".settings",
    "ModelSettings": ".settings",
    "TaskSettings": ".settings",
    "ObjectiveSettings": ".settings",
    "SpaceSettings": ".settings",
    "StudySettings": ".settings",
    "run_search": ".study",
    "copy_trials": ".transfer",
}

__all__ = [
    "ModelSettings",
    "ObjectiveSettings",
    "SearchError",
    "SearchReport",
    "SearchResult",
    "SearchSettings",
    "SpaceSettings",
    "StudySettings",
    "TaskSettings",
    "copy_trials",
    "run_search",
]

__getattr__ = lazy_getattr(__name__, _LAZY)
