"""Factor search: Bézier parameterisation, fitness tasks, scoring, and the Optuna study (``run_search``).

``from rope_adapter.search import SearchSettings, run_search`` runs a search; ``rope-adapter search`` is the
same from the command line. The heavy modules (torch, transformers, optuna) load only when their names are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .study import SearchError, SearchResult, SearchSettings, run_search
    from .transfer import copy_trials

_LAZY = {
    "SearchError": "study",
    "SearchResult": "study",
    "SearchSettings": "study",
    "run_search": "study",
    "copy_trials": "transfer",
}

__all__ = ["SearchError", "SearchResult", "SearchSettings", "copy_trials", "run_search"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
