"""The Optuna side of a search: the study fingerprint, the storage, creating or resuming a study with its baselines.

A study is created once with its settings in ``user_attrs`` (:data:`SETTINGS_ATTR`) and its baselines
enqueued as its first trials; a study that exists is resumed only with equal settings.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from rope_adapter.embedded import find_embedded
from rope_adapter.files import dumps_json
from rope_adapter.writable import unwritable_reason

from .bezier import BezierSpace
from .racing import stage_ends
from .samplers import DEFAULT_SAMPLER, LEGACY_SAMPLER
from .settings import SearchError, SearchSettings, redact_url

logger = logging.getLogger(__name__)

SETTINGS_ATTR = "rope_adapter_search"
"""Study user attribute holding the settings a study was made with (compared when a study is resumed)."""
TRIAL_ATTR = "lrs"
"""Trial user attribute holding everything a trial computed (factors, scores, constraints, timing)."""
BASELINE_ATTR = "baseline"
"""User attribute of the enqueued baseline trials: ``"base"`` or ``"uniform"``."""
FINGERPRINT_VERSION = 2


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
    path = Path(name).expanduser()
    embedded = find_embedded(name)
    if embedded is not None and not path.exists() and name.casefold() == embedded.name.casefold():
        return embedded.name
    if path.is_dir():
        config = path / "config.json"
        return {
            "folder": path.name,
            "config": _file_identity(config)["sha256"] if config.is_file() else None,
            "weights": weights_fingerprint(path),
        }
    return name


WEIGHT_SAMPLES = 64
"""Chunks read from each weights file for :func:`weights_fingerprint` (64 KiB each, evenly spaced)."""


def weights_fingerprint(folder: Path) -> str | None:
    """A cheap fingerprint of a model folder's weights: sha256 over each ``*.safetensors`` / ``*.bin`` file's name,
    size, header and :data:`WEIGHT_SAMPLES` evenly spaced 64 KiB chunks (other weights of the same architecture
    differ there; reading a few MB instead of gigabytes). None when the folder has no weights file."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}".encode())
        with open(file, "rb") as handle:
            for i in range(WEIGHT_SAMPLES + 1):
                handle.seek(min(size, (size * i) // (WEIGHT_SAMPLES + 1)))
                digest.update(handle.read(1 << 16))
    return digest.hexdigest()


def resolve_sampler(settings: SearchSettings, storage: Any) -> SearchSettings:
    """``settings`` with its sampler named: the one it gives; else the one the study ``settings.study`` in
    ``storage`` was made with (NSGA-II for a study made before the sampler was a setting), so that a study resumes
    with the command that made it; else :data:`~search.samplers.DEFAULT_SAMPLER` for a new study."""
    if settings.sampler is not None:
        return settings
    stored = None
    with contextlib.suppress(KeyError):
        study = optuna.load_study(study_name=settings.study, storage=storage)
        stored = _legacy_space(_wait_for_settings(study))
    sampler = stored.get("sampler") if isinstance(stored, dict) else None
    return replace(settings, sampler=sampler if isinstance(sampler, str) else DEFAULT_SAMPLER)


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
        "pairs": settings.pairs if isinstance(settings.pairs, int) else list(settings.pairs),
        "positions": None if settings.positions is None else list(settings.positions),
        "num_positions": settings.num_positions,
        "task_options": json.loads(
            dumps_json(settings.task_options, where="task_options", sort_keys=True, default=str)
        ),
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
            "endpoint_margin": settings.endpoint_margin,
        },
        "layer_bounds": [str(b) for b in settings.parsed_layer_bounds()],
        "max_step": settings.max_step,
        "user_constraints": [
            f"{getattr(c, '__module__', '?')}.{getattr(c, '__qualname__', repr(c))}" for c in settings.constraints
        ],
        "uniform": settings.uniform_values(),
        "perplexity": ppl,
        "race": {"ends": stage_ends(settings.search_records, settings.race), "z": settings.race_z},
        "sampler": _named_sampler(settings),
    }


def _named_sampler(settings: SearchSettings) -> str:
    if settings.sampler is None:
        raise ValueError("the settings name no sampler yet: pass them through resolve_sampler(settings, storage)")
    return settings.sampler


def _differences(stored: Any, current: Any, prefix: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(stored) | set(current)):
            out += _differences(stored.get(key), current.get(key), f"{prefix}{key}.")
        return out
    return [] if stored == current else [f"{prefix.rstrip('.')}: {stored!r} in the study, {current!r} now"]


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
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


SCHEMA_ATTEMPTS = 5


def _schema_race(exc: BaseException) -> bool:
    """True for the errors of two processes creating one fresh database's Optuna schema at once: both insert the
    schema's version row (a unique-constraint error in the later one) or one finds the tables half-made."""
    from sqlalchemy.exc import IntegrityError, OperationalError  # not at the top: 0.3 s, see open_storage

    return isinstance(exc, IntegrityError) or (
        isinstance(exc, OperationalError) and ("already exists" in str(exc) or "no such table" in str(exc))
    )


def open_storage(url: str, heartbeat: int = 30) -> Any:
    """Connect to an Optuna RDB storage (heartbeat on, failed trials retried); :class:`SearchError` if it cannot
    be reached. SQLite files get a 60 s lock timeout so that several local workers can share one."""
    from sqlalchemy.engine import make_url  # not at the top: sqlalchemy adds 0.3 s to every CLI command
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
            for attempt in range(SCHEMA_ATTEMPTS):
                try:
                    return optuna.storages.RDBStorage(
                        url,
                        engine_kwargs=engine_kwargs,
                        heartbeat_interval=heartbeat,
                        grace_period=2 * heartbeat,
                        **stale,
                    )
                except Exception as exc:
                    if attempt + 1 == SCHEMA_ATTEMPTS or not _schema_race(exc):
                        raise
                    time.sleep(0.2 * (attempt + 1))
    except (ImportError, ModuleNotFoundError) as exc:
        hint = " (pip install 'rope-adapter[postgres]' for PostgreSQL)" if backend == "postgresql" else ""
        raise SearchError(f"storage {shown!r} needs a database driver that is not installed: {exc}{hint}") from None
    except Exception as exc:
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


def _legacy_space(stored: Any) -> Any:
    """Stored settings of a study made before ``endpoint_margin`` existed (its end ys were widened) or before the
    sampler was a setting (NSGA-II)."""
    if isinstance(stored, dict) and isinstance(stored.get("space"), dict) and "endpoint_margin" not in stored["space"]:
        stored = {**stored, "space": {**stored["space"], "endpoint_margin": True}}
    if isinstance(stored, dict) and "sampler" not in stored:
        stored = {**stored, "sampler": LEGACY_SAMPLER}
    return stored


def _legacy_weights(stored: Any, current: Any) -> Any:
    """A study made before model folders were fingerprinted by their weights is checked on folder name and config
    only (what it recorded)."""
    for key in ("model", "tokenizer"):
        old, new = (stored or {}).get(key), (current or {}).get(key)
        if isinstance(old, dict) and isinstance(new, dict) and "weights" not in old and "weights" in new:
            stored = {**stored, key: {**old, "weights": new["weights"]}}
    return stored


def check_existing_study(storage: Any, name: str, fingerprint: dict[str, Any]) -> bool:
    """True when the study exists (with equal settings); :class:`SearchError` when it exists with others."""
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
    stored = _legacy_weights(_legacy_space(stored), fingerprint)
    diff = _differences(stored, fingerprint)
    if diff:
        hint = ""
        if any(d.startswith("space.endpoint_margin") for d in diff):
            hint = (
                " (a study made before the first and last control ys were kept within [s_min, s_max] resumes with "
                "--endpoint-margin)"
            )
        if any(d.startswith(("model.weights", "tokenizer.weights")) for d in diff):
            hint += (
                " (the model folder has the same name and config but other weights than the study's: its trials "
                "scored another model)"
            )
        if any(d.startswith("sampler") for d in diff):
            hint += (
                " (the sampler is part of a study: resume it with the sampler it was made with; to go on with another "
                "sampler, start a new --study and copy the old trials in with rope_adapter.search.copy_trials)"
            )
        raise SearchError(
            f"study {name!r} exists with other settings ({'; '.join(diff)}); resume it with the same settings, "
            f"or start a new one with another --study (or --out){hint}"
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


def check_writable(out: Path) -> None:
    """Create ``out`` (if needed) once a file can be written and flushed there: :class:`SearchError` naming the
    folder otherwise (a file in the way, a read-only or full disk)."""
    why = unwritable_reason(out, "the output folder")
    if why is None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            why = f"the output folder {out} cannot be made ({exc.strerror or exc})"
    if why is not None:
        raise SearchError(f"cannot write into the output folder: {why}; choose another --out") from None


@contextlib.contextmanager
def output_errors(out: Path) -> Iterator[None]:
    """An ``OSError`` while writing a search's outputs (a full or read-only disk) as one :class:`SearchError`; the
    trials are in the study storage already, so the same command resumes and writes the outputs again."""
    try:
        yield
    except OSError as exc:
        raise SearchError(
            f"cannot write the search outputs into {str(out)!r}: {exc.strerror or exc}; free some space (or make "
            "the folder writable) and rerun the same command: the finished trials are kept in the study"
        ) from exc


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _raised_inside(exc: BaseException, package: Path) -> bool:
    """True when the innermost frame of ``exc``'s traceback is a file of ``package``."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(package.resolve())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def storage_failure(exc: BaseException, shown_url: str, *, during_search: bool = False) -> SearchError | None:
    """The one-line :class:`SearchError` for an exception of a storage call, or None when it is not the storage's.

    The storage's: an ``OSError`` or SQLAlchemy error, Optuna's ``StorageInternalError``, or an ``AssertionError``
    (or ``UnboundLocalError``) raised inside Optuna itself, which is what ``study.optimize`` raises when a trial's
    result cannot be written (its bookkeeping asserts "Should not reach." over the real error). The message names
    the deepest storage error of the chain (SQLite's own words) and, on a full disk, the fix."""
    from sqlalchemy.exc import SQLAlchemyError  # not at the top: sqlalchemy adds 0.3 s to every CLI command

    kinds = (OSError, SQLAlchemyError, optuna.exceptions.StorageInternalError)
    internal = isinstance(exc, (AssertionError, UnboundLocalError)) and _raised_inside(
        exc, Path(optuna.__file__).parent
    )
    if not isinstance(exc, kinds) and not internal:
        return None
    chain = _chain(exc)
    causes = [e for e in chain if isinstance(e, kinds)]
    root = _first_line(causes[-1] if causes else exc)
    origin = f"; Optuna's storage layer then failed with an internal {_first_line(exc)}" if internal else ""
    full = any(
        (isinstance(e, OSError) and e.errno == errno.ENOSPC)
        or any(words in str(e).lower() for words in ("disk is full", "no space left"))
        for e in chain
    )
    if full:
        problem = f"the disk holding the study storage {shown_url} is full ({root}{origin})"
        fix = "free some space, or start again with another --out (and --storage) on a disk with room"
    else:
        problem = f"the study storage {shown_url} cannot be written ({root}{origin})"
        fix = "is its disk full or read-only? Free some space or choose another --out (and --storage)"
    then = "; finished trials are kept: rerun the same command to resume" if during_search else ""
    return SearchError(f"{problem}: {fix}{then}")


@contextlib.contextmanager
def storage_errors(shown_url: str, *, during_search: bool = False) -> Iterator[None]:
    """Turn a storage that cannot be written (full or read-only disk, lost database) into one :class:`SearchError`
    line (:func:`storage_failure`); during a search the finished trials are kept, so the same command resumes.
    Wrap storage calls only: an ``AssertionError`` counts as the storage's only when Optuna raised it."""
    try:
        yield
    except Exception as exc:
        error = storage_failure(exc, shown_url, during_search=during_search)
        if error is None:
            raise
        raise error from exc
