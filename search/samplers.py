"""The Optuna samplers a search can use, behind one seeded factory (:func:`build_sampler`).

- ``nsga2``: :class:`optuna.samplers.NSGAIISampler`, the paper's choice (constrained NSGA-II), built for hundreds
  of trials and more.
- ``gp``: :class:`optuna.samplers.GPSampler`, a Gaussian-process sampler (log-EHVI on two objectives, log-EI on one;
  constraints modelled by their own GPs since Optuna 4.5), the usual choice for a few dozen trials.
- ``tpe``: :class:`optuna.samplers.TPESampler`, multivariate, with the constant liar so that several workers on one
  storage do not propose the same point.

How each sampler reads what a search stores (every sampler reads the study's COMPLETE trials from the storage,
so workers on other machines share one history):

- constraints: every trial's values are set with ``Trial.set_constraint`` (:func:`search.trial.record_constraints`),
  which all three samplers read (feasible when every value is <= 0);
- infeasible trials finish with ``-inf`` objective values and no forward pass: NSGA-II ranks them by their
  constraint violation only; TPE puts them in its "bad" group; GPSampler clips them to the worst finite value
  for its objective model (we silence the warning it gives each time) and learns feasibility from the
  constraint GPs, so it avoids their region;
- raced-out trials are COMPLETE with values estimated through the reference they raced against
  (:mod:`search.racing`): each sampler takes them as observed values (GPSampler with its fitted noise, so the
  estimate counts as one noisy observation);
- pruned repeats (a proposal equal to an earlier scored trial) are PRUNED: GPSampler and NSGA-II ignore them.

Several workers: NSGA-II and TPE (constant liar) are independent per worker; GPSampler conditions on the other
workers' RUNNING trials (q-log-EHVI), so all three work with ``--workers`` and shared storages.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import optuna

SAMPLERS: dict[str, str] = {
    "nsga2": "NSGA-II (the paper's; for hundreds of trials)",
    "gp": "Gaussian process with constraints (Optuna's choice below a few hundred trials)",
    "tpe": "multivariate TPE with the constant liar",
}
"""The sampler names :attr:`SearchSettings.sampler` accepts, with what each is."""

DEFAULT_SAMPLER = "gp"
"""The sampler of a new study when :attr:`SearchSettings.sampler` is None (a resumed study keeps its own): it
found the best curves at a few dozen trials in ``benchmarks/samplers.py`` and ``benchmarks/feasibility.py``."""

LEGACY_SAMPLER = "nsga2"
"""The sampler of studies made before the sampler was a setting (their fingerprint has no ``sampler``)."""

STARTUP_TRIALS = 10
"""Trials (enqueued baselines included) before GPSampler and TPE fit a model; before that they sample at random."""


def sampler_seed(seed: int, worker_index: int, existing_trials: int) -> int:
    """A 32-bit seed from the search seed, the worker's index and the trials the study holds, so that every
    worker and every resumed run draws another sequence."""
    digest = hashlib.sha256(f"{seed}:{worker_index}:{existing_trials}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def describe_sampler(name: str, population: int) -> str:
    """How the sampler is written in reports and cards, e.g. ``GPSampler(n_startup_trials=10)``."""
    if name == "nsga2":
        return f"NSGAIISampler(population_size={population})"
    if name == "gp":
        return f"GPSampler(n_startup_trials={STARTUP_TRIALS})"
    if name == "tpe":
        return f"TPESampler(multivariate=True, constant_liar=True, n_startup_trials={STARTUP_TRIALS})"
    raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")


def build_sampler(name: str, *, seed: int, population: int) -> Any:
    """The Optuna sampler ``name`` (one of :data:`SAMPLERS`), seeded."""
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    if name == "gp":
        # infeasible trials hold -inf values; GPSampler clips them for its objective model and says so each time
        warnings.filterwarnings("ignore", message="Clip non-finite values", module="optuna")
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=STARTUP_TRIALS)
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=seed, multivariate=True, constant_liar=True, n_startup_trials=STARTUP_TRIALS
            )
    raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
