"""Evaluation: accuracy and log-probability by gold position for named factor variants, length extrapolation,
attention analysis, and their reports and plots.

``from rope_adapter.evaluate import EvalSettings, run_eval`` runs what ``rope-adapter eval`` runs, and
``run_analysis(AnalyzeSettings(...))`` what ``rope-adapter analyze`` runs. The heavy
modules (torch, transformers, matplotlib) load only when their names are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rope_adapter.lazy import lazy_getattr

if TYPE_CHECKING:
    from rope_adapter.scoring.loading import EvalError
    from rope_adapter.scoring.settings_parts import ModelSettings, TaskSettings

    from .analyze import AnalyzeSettings, run_analysis
    from .run import EvalResult, EvalSettings, run_eval

_LAZY = {
    "AnalyzeSettings": ".analyze",
    "run_analysis": ".analyze",
    "EvalError": "rope_adapter.scoring.loading",
    "EvalResult": ".run",
    "EvalSettings": ".run",
    "ModelSettings": "rope_adapter.scoring.settings_parts",
    "TaskSettings": "rope_adapter.scoring.settings_parts",
    "run_eval": ".run",
}

__all__ = [
    "AnalyzeSettings",
    "EvalError",
    "EvalResult",
    "EvalSettings",
    "ModelSettings",
    "TaskSettings",
    "run_analysis",
    "run_eval",
]

__getattr__ = lazy_getattr(__name__, _LAZY)
