"""Optuna's per-trial logs and experimental warnings silenced around the calls a search makes."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import optuna


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Silence Optuna's per-trial INFO logs and its experimental warnings for the calls we rely on (heartbeats
    and the retry callback are marked experimental)."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(verbosity)
