"""What one search trial does and how a worker runs trials: the Optuna objective (constraints through
``Trial.set_constraint``, the perplexity guard, racing in stages), repeated proposals, the
stopping callbacks and the loop of a worker process (the sampler comes from :mod:`search.samplers`).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import numpy as np
import optuna
from tqdm.auto import tqdm

from rope_adapter.scoring.logprobs import position_means

from .constraints import perplexity_constraint
from .quiet import quiet_optuna
from .racing import estimated_by_position, paired_check, record_scores
from .samplers import build_sampler, sampler_seed
from .settings import SearchSettings, redact_url
from .storage import BASELINE_ATTR, TRIAL_ATTR
from .storage_failures import storage_failure
from .storage_url import open_storage
from .trial_info import TrialInfo, TrialScores
from .worker import Worker, make_worker

logger = logging.getLogger(__name__)


def constraint_names(worker: Worker) -> list[str]:
    """Names of the constraint values a trial stores."""
    names = worker.constraints.names()
    if worker.base_nll is not None:
        names.append(f"perplexity increase <= {worker.settings.space.max_ppl_increase:g}")
    return names


def make_objective(worker: Worker) -> Callable[[Any], tuple[float, ...]]:
    """The Optuna objective of a worker: factors from the trial's control points, cheap constraints first, then
    the perplexity guard, then the task score (skipped, with ``-inf`` values, when a constraint already fails)."""
    settings = worker.settings
    space = settings.space.bezier()
    spec = settings.objective_spec()
    bounds = space.param_bounds()
    n_values = len(spec.names)

    def objective(trial: Any) -> tuple[float, ...]:
        start = time.perf_counter()
        params = {name: trial.suggest_float(name, low, high) for name, (low, high) in bounds.items()}
        cp = space.decode(params)
        factors, values = worker.constraints.evaluate(cp)
        info: TrialInfo = {
            "control_points": cp.tolist(),
            "factors": None if factors is None else [float(f) for f in factors],
            "worker": worker.name,
            "evaluated": False,
        }
        feasible = all(v <= 0 for v in values)
        if feasible and factors is not None:
            prior = _scored_twin(trial, params)
            if prior is not None:  # NSGA-II re-proposes converged parents: never pay twice for one curve
                return _repeat(trial, worker, prior, info, start)
            worker.repeats_in_row = 0
        if worker.base_nll is not None:
            if feasible and factors is not None:
                nll = worker.evaluator.nll(factors)
                ppl_value = perplexity_constraint(nll, worker.base_nll, settings.space.max_ppl_increase or 0.0)
                info["perplexity"] = {"ppl": math.exp(nll), "base_ppl": math.exp(worker.base_nll)}
                values.append(ppl_value)
                feasible = ppl_value <= 0
            else:
                values.append(0.0)
        info["constraints"] = values
        record_constraints(trial, worker, values)
        if not feasible or factors is None:
            info["seconds"] = time.perf_counter() - start
            record_info(trial, info)
            return (-math.inf,) * n_values
        info.update(_score_in_stages(trial, worker, factors))
        by_position = {int(p): v for p, v in info["by_position"].items()}
        result = spec.values(by_position)
        info.update(evaluated=True, objectives=spec.summary(by_position), seconds=time.perf_counter() - start)
        record_info(trial, info)
        return result

    return objective


class _RaceReference(TrialInfo):
    number: int


class WorkerRun(TypedDict):
    """What :func:`run_worker` did: its sampler's seed and the trials it finished."""

    seed: int
    ran: int


def _race_reference(study: Any, num_samples: int, baselines_only: bool = False) -> _RaceReference | None:
    """The fully scored trial with the best mean so far (its stored trial info and number), or None;
    ``baselines_only``: among the baselines (the unscaled model and uniform factors)."""
    best: tuple[int, TrialInfo] | None = None
    for t in complete_trials(study):
        if baselines_only and t.user_attrs.get(BASELINE_ATTR) is None:
            continue
        info: TrialInfo = t.user_attrs.get(TRIAL_ATTR) or {}
        scores = info.get("sample_scores")
        if not info.get("evaluated") or info.get("raced_out") or scores is None or len(scores) != num_samples:
            continue
        if best is None or info["objectives"]["mean"] > best[1]["objectives"]["mean"]:
            best = (t.number, info)
    return None if best is None else {"number": best[0], **best[1]}


def _score_in_stages(trial: Any, worker: Worker, factors: np.ndarray) -> TrialScores:
    """Score a trial stage by stage (racing); the trial info's score fields.

    The unscaled model, and every trial while the study holds no fully scored one, are scored on all records. A
    uniform baseline races against the best fully scored baseline (so a uniform factor stops only when another
    baseline is clearly better, and the best uniform factor is always scored in full); a searched trial against
    the best fully scored trial.
    """
    settings = worker.settings
    positions = worker.search.positions
    reference = None
    kind = trial.user_attrs.get(BASELINE_ATTR)
    if len(worker.stages) > 1 and kind != "base":
        reference = _race_reference(trial.study, len(worker.search), baselines_only=kind is not None)
    parts, checks = [], []
    for j, stage in enumerate(worker.stages):
        parts.append(worker.evaluator.score(factors, stage))
        if reference is None or j == len(worker.stages) - 1:
            continue
        scores = np.concatenate([p.per_sample for p in parts])
        n = worker.stage_ends[j]
        check = paired_check(
            record_scores(scores, worker.sample_records, n),
            record_scores(reference["sample_scores"][: len(scores)], worker.sample_records, n),
            settings.study.race_z,
        )
        checks.append(check.to_dict())
        if check.stop:
            break
    scores = np.concatenate([p.per_sample for p in parts])
    scored_positions = positions[: len(scores)]
    by_position = position_means(scored_positions, scores)
    out: TrialScores = {
        "records_scored": worker.stage_ends[len(parts) - 1],
        "sample_scores": [round(float(x), 6) for x in scores],
        "eval_seconds": float(sum(p.seconds for p in parts)),
    }
    if parts[0].exact is not None:
        exact = np.concatenate([p.exact for p in parts]).astype(np.float64)
        out["accuracy_by_position"] = {str(p): v for p, v in position_means(scored_positions, exact).items()}
    if parts[0].logprob is not None:
        logprob = np.concatenate([p.logprob for p in parts])
        out["logprob_by_position"] = {str(p): v for p, v in position_means(scored_positions, logprob).items()}
    if checks:
        out["race"] = {"reference": reference["number"], "checks": checks}
    if len(scores) < len(positions):  # stopped: estimate the whole-set means through the reference
        reference_partial = position_means(scored_positions, np.asarray(reference["sample_scores"][: len(scores)]))
        reference_full = {int(p): float(v) for p, v in reference["by_position"].items()}
        by_position = estimated_by_position(by_position, reference_partial, reference_full)
        out["raced_out"] = True
        out["partial_by_position"] = {str(p): v for p, v in position_means(scored_positions, scores).items()}
    out["by_position"] = {str(p): v for p, v in by_position.items()}
    return out


def record_info(trial: Any, info: TrialInfo) -> None:
    """Store what the trial computed (user attribute :data:`TRIAL_ATTR`) plus a few flat attributes that
    optuna-dashboard shows and sorts: ``factors``, ``accuracy`` (teacher-forced, mean over the scored samples'
    positions), ``records_scored``, ``raced_out`` and ``feasible``."""
    trial.set_user_attr(TRIAL_ATTR, info)
    if info.get("factors") is not None:
        trial.set_user_attr("factors", [round(float(f), 4) for f in info["factors"]])
    accuracy = info.get("accuracy_by_position")
    if accuracy:
        trial.set_user_attr("accuracy", round(float(sum(accuracy.values()) / len(accuracy)), 4))
    if "records_scored" in info:
        trial.set_user_attr("records_scored", int(info["records_scored"]))
        trial.set_user_attr("raced_out", bool(info.get("raced_out")))
    if info.get("constraints") is not None:
        trial.set_user_attr("feasible", all(c <= 0 for c in info["constraints"]))


MAX_TAKEN_OVER = 10
"""How many trials a worker may lose to another worker's stale-trial retry before it gives up (see run_worker)."""

MAX_REPEATS_IN_ROW = 20
"""A worker prunes at most this many repeated proposals in a row; then a repeat is recorded as a finished trial
(with the earlier trial's scores) so that a converged population still makes progress towards ``trials``."""


def _scored_twin(trial: Any, params: dict[str, float]) -> Any | None:
    """An earlier finished, scored trial with exactly these parameters (scoring is deterministic)."""
    for other in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if other.params == params and (other.user_attrs.get(TRIAL_ATTR) or {}).get("evaluated"):
            return other
    return None


def _repeat(trial: Any, worker: Worker, prior: Any, info: TrialInfo, start: float) -> tuple[float, ...]:
    """A proposal equal to an earlier scored trial: pruned (not counted in ``trials``, no forward pass), or after
    :data:`MAX_REPEATS_IN_ROW` such prunes, finished with the earlier trial's values."""
    worker.repeats_in_row += 1
    earlier: TrialInfo = prior.user_attrs[TRIAL_ATTR]
    info.update(duplicate_of=prior.number, constraints=list(earlier["constraints"]))
    if worker.repeats_in_row <= MAX_REPEATS_IN_ROW:
        info["seconds"] = time.perf_counter() - start
        trial.set_user_attr(TRIAL_ATTR, info)
        raise optuna.TrialPruned(f"same parameters as trial {prior.number}")
    worker.repeats_in_row = 0
    record_constraints(trial, worker, earlier["constraints"])
    copied: TrialInfo = {**earlier, **info, "eval_seconds": 0.0, "seconds": time.perf_counter() - start}
    record_info(trial, copied)
    return tuple(prior.values)


def record_constraints(trial: Any, worker: Worker, values: Sequence[float]) -> None:
    """Give the trial its constraint values by name (``Trial.set_constraint``), as constrained NSGA-II reads them:
    feasible when every value is <= 0. A trial that breaks a cheap constraint gets 0 for the constraints it was
    not evaluated on (the perplexity guard)."""
    names = constraint_names(worker)
    for name, value in zip(names, list(values) + [0.0] * (len(names) - len(values)), strict=True):
        trial.set_constraint(name, float(value))


def make_sampler(worker: Worker, existing_trials: int) -> tuple[Any, int]:
    """The worker's seeded sampler (``settings.study.sampler``; seed from seed, worker index, trials so far); every sampler
    reads each trial's constraint values as the objective recorded them (:func:`record_constraints`)."""
    settings = worker.settings
    seed = sampler_seed(settings.study.seed, worker.index, existing_trials)
    return build_sampler(settings.study.sampler, seed=seed, population=settings.study.population), seed


def complete_trials(study: Any) -> list[Any]:
    """The study's finished (COMPLETE) trials."""
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


class TrialProgress:
    """A tqdm bar over finished trials with the best scores so far (feasible, evaluated trials); with the bar off, a
    log line per finished trial."""

    def __init__(self, enabled: bool, total: int | None, done: int, names: Sequence[str]) -> None:
        self.bar = tqdm(
            total=total, initial=done, desc="search trials", unit="trial", disable=not enabled, file=sys.stderr
        )
        self.enabled, self.total = enabled, total
        self.names = list(names)

    def __call__(self, study: Any, trial: Any) -> None:
        trials = complete_trials(study)
        self.bar.n = len(trials)
        best: dict[str, float] = {}
        evaluated = 0
        for t in trials:
            info: TrialInfo = t.user_attrs.get(TRIAL_ATTR) or {}
            if not info.get("evaluated"):
                continue
            evaluated += 1
            for key, value in (info.get("objectives") or {}).items():
                best[key] = max(best.get(key, -math.inf), value)
        postfix = {f"best {k}": f"{v:.3f}" for k, v in best.items()}
        postfix["evaluated"] = evaluated
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.refresh()
        if not self.enabled:  # no bar (--no-progress, a log file): a line per finished trial
            of = "" if self.total is None else f" of {self.total}"
            logger.info(
                "search trials: %d%s finished (%s)", len(trials), of, ", ".join(f"{k} {v}" for k, v in postfix.items())
            )

    def close(self) -> None:
        self.bar.close()


def records_scored(trials: Sequence[Any]) -> int:
    """Search records the trials scored in all (one prefix forward pass each; racing scores fewer)."""
    return sum(int((t.user_attrs.get(TRIAL_ATTR) or {}).get("records_scored", 0)) for t in trials)


class _RecordBudget:
    """Stops a worker once the study's trials have scored ``limit`` search records."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self, study: Any, trial: Any) -> None:
        if records_scored(study.get_trials(deepcopy=False)) >= self.limit:
            study.stop()


class _BudgetStop:
    """Stops a worker early enough for the held-out evaluation to fit in the whole-run budget.

    Costs are counted per search record: a trial raced out after a fifth of the records cost a fifth of a full
    one, and the held-out step scores every held-out record for each configuration."""

    def __init__(
        self,
        deadline: float,
        holdout_samples: int,
        search_samples: int,
        configs: int,
        search_records: int = 1,
        confirm_samples: int = 0,
    ) -> None:
        self.deadline = deadline
        # the held-out step scores `configs` configurations; confirmation scores `confirm_samples` samples in all
        self.ratio = (configs * holdout_samples + confirm_samples) / max(1, search_samples)
        self.search_records = max(1, search_records)
        self.costs: list[float] = []  # seconds of each scored trial, scaled to a full pass over the search records

    def __call__(self, study: Any, trial: Any) -> None:
        info: TrialInfo = trial.user_attrs.get(TRIAL_ATTR) or {}
        if info.get("evaluated") and "duplicate_of" not in info:
            records = int(info.get("records_scored") or self.search_records)
            self.costs.append(float(info.get("seconds", 0.0)) * self.search_records / max(1, records))
        trial_cost = max(self.costs) if self.costs else 0.0
        holdout_cost = 1.15 * float(np.median(self.costs)) * self.ratio if self.costs else 0.0  # +15 %: longer targets
        if time.time() + trial_cost + holdout_cost > self.deadline:
            study.stop()


def run_worker(
    worker: Worker, storage: Any, deadline: float | None, progress: TrialProgress | None = None
) -> WorkerRun:
    """Run trials until the study holds ``trials`` finished ones, the timeout passes or the budget says stop."""
    settings = worker.settings
    with quiet_optuna():
        probe = optuna.load_study(study_name=settings.study.name, storage=storage)
        existing = len(probe.get_trials(deepcopy=False))
        sampler, seed = make_sampler(worker, existing)
        study = optuna.load_study(study_name=settings.study.name, storage=storage, sampler=sampler)
        done = len(complete_trials(study))
        callbacks: list[Callable] = []
        if settings.study.trials is not None:
            if done >= settings.study.trials:
                return {"seed": seed, "ran": 0}
            callbacks.append(
                optuna.study.MaxTrialsCallback(settings.study.trials, states=(optuna.trial.TrialState.COMPLETE,))
            )
        timeout = settings.study.timeout
        if deadline is not None:
            holdout_samples = 0 if worker.holdout is None else len(worker.holdout)
            configs = 3 * (2 if settings.holdout_accuracy and settings.objective.score == "logprob" else 1)
            callbacks.append(
                _BudgetStop(
                    deadline,
                    holdout_samples,
                    len(worker.search),
                    configs,
                    worker.stage_ends[-1] if worker.stage_ends else 1,
                    0 if worker.confirm is None else 2 * settings.confirm_top * len(worker.confirm),
                )
            )
            remaining = deadline - time.time()
            if remaining <= 0:
                return {"seed": seed, "ran": 0}
            timeout = remaining if timeout is None else min(timeout, remaining)
        if settings.study.max_records is not None:
            if records_scored(study.get_trials(deepcopy=False)) >= settings.study.max_records:
                return {"seed": seed, "ran": 0}
            callbacks.append(_RecordBudget(settings.study.max_records))
        if progress is not None:
            callbacks.append(progress)
        before = done
        started = time.time()
        for _ in range(MAX_TAKEN_OVER):
            left = None if timeout is None else timeout - (time.time() - started)
            if left is not None and left <= 0:
                break
            try:
                study.optimize(make_objective(worker), timeout=left, callbacks=callbacks, catch=())
                break
            except ValueError as exc:  # our trial went stale on a busy machine and was finished elsewhere
                if not str(exc).startswith("Cannot tell a"):
                    raise
                logger.warning(
                    "%s: a trial's heartbeat went stale (a busy machine) and the trial was retried elsewhere; this "
                    "worker's result for it is dropped and it goes on (raise --heartbeat to avoid this)",
                    worker.name,
                )
        return {"seed": seed, "ran": len(complete_trials(study)) - before}


def worker_entry(
    settings: SearchSettings, index: int, ready: Any, go: Any, errors: Any, deadline: float | None
) -> None:
    """Entry point of a spawned worker process."""
    try:
        worker = make_worker(settings, index, with_holdout=False)
        storage = open_storage(settings.storage_url(), settings.study.heartbeat)
        ready.set()
        go.wait()
        run_worker(worker, storage, deadline)
    except BaseException as exc:
        failure = storage_failure(exc, redact_url(settings.storage_url())) if isinstance(exc, Exception) else None
        errors.put(f"worker {index}: {failure or f'{type(exc).__name__}: {exc}'}")
        ready.set()
        raise SystemExit(1) from None
