"""Opening a study storage from its URL: SQLite files (several local workers share one) or a database server."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import optuna

from rope_adapter.errors import first_line

from .quiet import quiet_optuna
from .settings import SearchError, redact_url

MAX_RETRIES = 2
"""How often Optuna's heartbeat retries a killed worker's trial (and :func:`search.storage.rerun_interrupted` an
interrupted baseline)."""

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
    engine_kwargs: dict[str, Any] = {}  # keywords of SQLAlchemy's create_engine, which optuna passes on
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
        with quiet_optuna():
            retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
            if retry is not None:  # Optuna >= 4.9
                stale = {"heartbeat_stale_trial_callback": retry(max_retry=MAX_RETRIES)}
            else:
                stale = {"failed_trial_callback": optuna.storages.RetryFailedTrialCallback(max_retry=MAX_RETRIES)}
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
        first = first_line(exc)
        if parsed.password:
            first = first.replace(parsed.password, "***")
        raise SearchError(f"cannot reach the study storage {shown!r}: {first}") from None
