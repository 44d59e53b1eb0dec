"""The search's own settings parts (:mod:`rope_adapter.composed`): the objective (:class:`ObjectiveSettings`), the
search space and its constraints (:class:`SpaceSettings`) and the study (:class:`StudySettings`: its length, storage
and sampler). The model and task parts are the core's (:mod:`rope_adapter.scoring.settings_parts`), shared with
``eval``. Each part checks its own fields when made (:class:`SearchError`); :class:`~search.settings.SearchSettings`
checks what joins parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rope_adapter.composed import setting
from rope_adapter.errors import LrsError
from rope_adapter.numbers import as_int, as_real, as_reals

from .bezier import X_MODES, BezierSpace
from .constraints import LayerBound, UserConstraint
from .objective import SCORE_KINDS, ObjectiveSpec
from .samplers import SAMPLERS

DEFAULT_UNIFORM = (0.5, 0.7, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.5, 2.0)
"""Uniform factors enqueued as baselines (those inside ``[s_min, s_max]``) unless ``uniform`` is given."""
SELECT_CHOICES = ("mean", "worst", "balanced")


class SearchError(LrsError):
    """Bad search input, reported before any heavy work: the message says what was wrong and what to do."""


def _whole(part: object, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """Whole-number fields as Python ints (any number type; ``"5"``, ``True`` or ``2.7`` refused, naming them)."""
    for name in names + optional:
        value = as_int(getattr(part, name), name, error=SearchError, optional=name in optional)
        setattr(part, name, value)


def _real(part: object, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    for name in names + optional:
        value = as_real(getattr(part, name), name, error=SearchError, optional=name in optional)
        setattr(part, name, value)


@dataclass
class ObjectiveSettings:
    """How a trial's per-sample scores become the study's objective values, and which trial becomes the adapter."""

    score: str = setting(
        "answer",
        "'answer': teacher-forced accuracy of the whole answer (greedy's verdict without a decode loop), its "
        "log-prob breaking ties; 'soft': the same pass kept continuous (sigmoid of the smallest answer-token logit "
        "margin; the held-out verdict stays accuracy); 'logprob': mean gold log-prob of the first k answer tokens (a "
        "proxy); 'accuracy': greedy decoding judged by the task's rule.",
        choices=list(SCORE_KINDS),
    )
    k: int | None = setting(
        None,
        "Answer tokens in the 'logprob' score (None: every token). The held-out report checks a first-k gain "
        "against the whole answer.",
    )
    kind: str = setting(
        "pareto",
        "'pareto': maximise mean and worst position score (two objectives); 'weighted': a single fitness.",
        flat="objective",
        choices=["pareto", "weighted"],
    )
    position_weights: tuple[float, ...] | None = setting(None, "Weighted fitness: weight of each gold position.")
    worst_weight: float = setting(0.5, "Weighted fitness: weight of the worst position (the rest goes to the mean).")
    select: str = setting(
        "mean",
        "Which Pareto trial becomes the adapter: 'mean' (best mean), 'worst' (best worst position) or "
        "'balanced' (best mean + worst). The weighted objective always takes the best fitness.",
        choices=list(SELECT_CHOICES),
    )

    def __post_init__(self) -> None:
        _whole(self, (), ("k",))
        _real(self, ("worst_weight",))
        if self.position_weights is not None:
            self.position_weights = tuple(as_reals(self.position_weights, "position_weights", error=SearchError))
        if self.select not in SELECT_CHOICES:
            raise SearchError(f"select must be 'mean', 'worst' or 'balanced', got {self.select!r}")
        try:
            self.spec()
        except ValueError as exc:
            raise SearchError(str(exc)) from None

    def spec(self, lengths: int = 1) -> ObjectiveSpec:
        """Score kind, k and objective; in a study over several record lengths the weights are those of each
        length's gold positions, length after length."""
        return ObjectiveSpec(
            score=self.score,
            k=self.k,
            kind=self.kind,
            position_weights=None if self.position_weights is None else tuple(self.position_weights) * lengths,
            worst_weight=self.worst_weight,
        )


@dataclass
class SpaceSettings:
    """The search space (a Bezier curve of factors over depth) and what a feasible curve must respect."""

    degree: int = setting(3, "Degree of the Bezier curve of factors over depth (degree + 1 control points).")
    x_mode: str = setting(
        "fixed",
        "'fixed': control xs evenly spaced, s_l = y(l/(L-1)); 'free': xs searched too.",
        choices=list(X_MODES),
    )
    s_min: float = setting(0.5, "Smallest allowed factor (a constraint, not a clip); below 1 compresses positions.")
    s_max: float = setting(2.0, "Largest allowed factor.")
    margin: float = setting(
        0.25, "Interior control ys are sampled from [s_min - m, s_max + m], m = margin * (s_max - s_min)."
    )
    endpoint_margin: bool = setting(
        False,
        "Widen the first and last control ys by the margin too (they are the first and last layer's factors, so "
        "beyond the bounds they are always infeasible); only to resume a study made before end ys were kept in "
        "bounds.",
    )
    layer_bounds: tuple[str, ...] = setting(
        (), "Extra bounds 'FIRST-LAST:LOW:HIGH' on groups of layers.", metavar="FIRST-LAST:LOW:HIGH"
    )
    max_step: float | None = setting(None, "Largest allowed change of the factor between neighbouring layers.")
    constraints: tuple[UserConstraint, ...] = setting(
        (), "Python API only: callables factors -> float, feasible when <= 0 (module-level, for workers).", cli=False
    )
    uniform: tuple[float, ...] | None = setting(
        None,
        "Uniform factors enqueued as baselines (default: 0.5 0.7 0.8 0.9 0.95 1.05 1.1 1.25 1.5 2.0 within the "
        "bounds).",
    )
    ppl_text: str | None = setting(None, "Text file for the perplexity guard (default: a built-in English paragraph).")
    max_ppl_increase: float | None = setting(
        None, "Perplexity guard: the text's perplexity may rise by at most this fraction (e.g. 0.05); off if unset."
    )
    ppl_window_chars: int = setting(1000, "Perplexity guard: window length in characters.")
    ppl_windows: int = setting(4, "Perplexity guard: number of windows.")

    def __post_init__(self) -> None:
        _whole(self, ("degree", "ppl_windows", "ppl_window_chars"))
        _real(self, ("s_min", "s_max", "margin"), ("max_step", "max_ppl_increase"))
        if self.uniform is not None:
            self.uniform = tuple(as_reals(self.uniform, "uniform", error=SearchError))
        if isinstance(self.layer_bounds, str) or not isinstance(self.layer_bounds, list | tuple):
            raise SearchError(f"layer_bounds must be a list or tuple, got {self.layer_bounds!r}")
        self.layer_bounds = tuple(self.layer_bounds)
        self.constraints = tuple(self.constraints)
        try:
            self.bezier()
            self.parsed_layer_bounds()
        except ValueError as exc:
            raise SearchError(str(exc)) from None
        if self.x_mode not in X_MODES:
            raise SearchError(f"x_mode must be one of {X_MODES}, got {self.x_mode!r}")
        if self.max_ppl_increase is not None and not self.max_ppl_increase >= 0:
            raise SearchError(f"max_ppl_increase must be >= 0, got {self.max_ppl_increase}")
        if self.ppl_text is not None and self.max_ppl_increase is None:
            raise SearchError("--ppl-text needs --max-ppl-increase (the perplexity guard is off without it)")
        if self.ppl_windows < 1 or self.ppl_window_chars < 2:
            raise SearchError("ppl_windows must be >= 1 and ppl_window_chars >= 2")
        bad = [u for u in self.uniform_values() if not self.s_min <= u <= self.s_max]
        if bad:
            raise SearchError(
                f"uniform baselines {bad} lie outside [s_min, s_max] = [{self.s_min:g}, {self.s_max:g}]: "
                "they would be infeasible; drop them or widen the bounds"
            )

    def bezier(self) -> BezierSpace:
        """The Bezier search space."""
        return BezierSpace(
            degree=self.degree,
            s_min=self.s_min,
            s_max=self.s_max,
            x_mode=self.x_mode,
            margin=self.margin,
            endpoint_margin=self.endpoint_margin,
        )

    def parsed_layer_bounds(self) -> tuple[LayerBound, ...]:
        """``layer_bounds`` parsed."""
        return tuple(LayerBound.parse(b) if isinstance(b, str) else b for b in self.layer_bounds)

    def uniform_values(self) -> list[float]:
        """The uniform baselines to enqueue (the defaults are filtered to the bounds; given ones must fit)."""
        if self.uniform is None:
            return [u for u in DEFAULT_UNIFORM if self.s_min <= u <= self.s_max and u != 1.0]
        return [float(u) for u in self.uniform if float(u) != 1.0]


@dataclass
class StudySettings:
    """The Optuna study: how long it runs, where it is stored, its sampler and racing."""

    trials: int | None = setting(50, "Finished trials the study should hold (a resumed study runs only the rest).")
    timeout: float | None = setting(
        None, "Stop starting trials after this many seconds (this run's search phase).", metavar="S"
    )
    budget: float | None = setting(
        None,
        "Whole-run budget in seconds: stop starting trials early enough that the held-out evaluation "
        "(estimated from the measured trial cost) still fits.",
        metavar="S",
    )
    storage: str | None = setting(
        None,
        "Optuna storage URL (e.g. postgresql+psycopg2://user:pw@host/db); default: sqlite:///OUT/study.db.",
        metavar="URL",
    )
    name: str = setting("lrs-search", "Study name inside the storage.", flat="study", metavar="NAME")
    workers: int = setting(1, "Worker processes on this machine (each loads the model once).")
    sampler: str | None = setting(
        None,
        "Optuna sampler: 'gp' (Gaussian process with constraints, for a few dozen trials), 'nsga2' (the paper's "
        "NSGA-II, for hundreds of trials) or 'tpe' (multivariate TPE); see rope_adapter.search.samplers. Default: "
        "the sampler a resumed study was made with, 'gp' for a new study.",
        choices=list(SAMPLERS),
    )
    population: int = setting(16, "NSGA-II population size (--sampler nsga2).")
    race: tuple[float, ...] = setting(
        (0.2, 0.5),
        "Racing: shares of the search records after which a trial is compared (paired, by record) with the best "
        "fully scored trial so far and stopped when clearly worse; () scores every trial on every record.",
    )
    race_z: float = setting(
        1.645, "Racing: a trial stops when mean(d) + z * se(d) < 0 (one-sided; larger z stops less)."
    )
    max_records: int | None = setting(
        None,
        "Stop starting trials once the study's trials have scored this many search records in all (one prefix "
        "forward pass each): a budget in forward passes, to compare racing with plain NSGA-II.",
        metavar="N",
    )
    seed: int = setting(0, "Seed of the samplers (machines sharing a study should use different seeds).")
    heartbeat: int = setting(30, "Seconds between a running trial's heartbeats; stale after twice that.", metavar="S")

    def __post_init__(self) -> None:
        _whole(self, ("workers", "population", "seed", "heartbeat"), ("trials", "max_records"))
        _real(self, ("race_z",), ("timeout", "budget"))
        self.race = tuple(as_reals(self.race, "race", error=SearchError))  # finite here; stage_ends names the range
        if self.workers < 1:
            raise SearchError(f"workers must be an integer >= 1, got {self.workers!r}")
        if self.sampler is not None and self.sampler not in SAMPLERS:
            raise SearchError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if self.population < 2:
            raise SearchError(f"population must be >= 2 (NSGA-II), got {self.population}")
        if self.heartbeat < 1:
            raise SearchError(f"heartbeat must be >= 1 second, got {self.heartbeat}")
        if self.trials is None and self.timeout is None and self.budget is None:
            raise SearchError("give a number of trials, a timeout or a budget: the search needs a stopping rule")
        if self.trials is not None and self.trials < 0:
            raise SearchError(f"trials must be >= 0, got {self.trials}")
        for name in ("timeout", "budget"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise SearchError(f"{name} must be > 0 seconds, got {value}")
        if not (math.isfinite(self.race_z) and self.race_z > 0):
            raise SearchError(f"race_z must be a finite number > 0, got {self.race_z!r}")
        if self.max_records is not None and self.max_records < 1:
            raise SearchError(f"max_records must be an integer >= 1, got {self.max_records!r}")
        if not self.name or not isinstance(self.name, str):
            raise SearchError("the study name must be a non-empty string")
