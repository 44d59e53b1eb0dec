"""A storage that cannot be written (a full or read-only disk, a lost database) as one :class:`SearchError` line."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

import optuna

from .settings import SearchError


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
