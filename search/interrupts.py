"""Ctrl-C (and, for the CLI, SIGTERM) during a search, never inside a storage call.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread. Raised inside SQLAlchemy or a
database driver, it leaves a session half-done with its connection checked out and its transaction open:
SQLite keeps that connection's lock, and the write that records the running trial as failed (Optuna does it
on the way out) then waits for the whole lock timeout and fails with "database is locked" (found by the suite in
session 23: a SIGTERM sent while a trial was being written took 60 s and ended in a storage error instead of
"interrupted").

:func:`interrupts_outside_storage` installs a handler that raises ``KeyboardInterrupt`` at once unless the main
thread is inside a storage call (:data:`STORAGE_MODULES` on its stack); then it looks again every
:data:`RECHECK_SECONDS` (a helper thread re-sends SIGINT to the main thread) and raises as soon as the call has
returned. A second signal while one waits raises at once, so a storage call that hangs can still be left.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType

STORAGE_MODULES: tuple[str, ...] = (
    "sqlalchemy",
    "sqlite3",
    "psycopg2",
    "pymysql",
    "MySQLdb",
    "optuna.storages",
    "optuna.study._tell",
)
"""Modules whose code must not be interrupted half-way: a frame of one of them on the main thread's stack
defers the interrupt."""

RECHECK_SECONDS = 0.05
"""How often a deferred interrupt looks again whether the storage call has returned."""


def in_storage_call(frame: FrameType | None) -> bool:
    """True when ``frame`` or one of its callers runs code of :data:`STORAGE_MODULES`."""
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if any(name == p or name.startswith(p + ".") for p in STORAGE_MODULES):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def interrupts_outside_storage(extra_signals: Sequence[int] = ()) -> Iterator[None]:
    """While the block runs, SIGINT and ``extra_signals`` raise ``KeyboardInterrupt`` in the main thread, but
    never inside a storage call (see the module docstring). Outside the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"waiting": False, "recheck": False}

    def recheck() -> None:
        time.sleep(RECHECK_SECONDS)
        if state["waiting"]:
            state["recheck"] = True
            _thread.interrupt_main(signal.SIGINT)  # runs handler() again in the main thread

    def handler(signum: int, frame: FrameType | None) -> None:
        if state["recheck"]:
            state["recheck"] = False  # our own look again, not a new signal
        elif state["waiting"]:
            state["waiting"] = False
            raise KeyboardInterrupt  # a second signal while one waits: at once
        if in_storage_call(frame):
            state["waiting"] = True
            threading.Thread(target=recheck, name="lrs-interrupt-recheck", daemon=True).start()
            return
        state["waiting"] = False
        raise KeyboardInterrupt

    signals = [signal.SIGINT, *(s for s in extra_signals if s != signal.SIGINT)]
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        state["waiting"] = False
        for s, old in previous.items():
            signal.signal(s, old)


def storage_safe_interrupts() -> contextlib.AbstractContextManager[None]:
    """:func:`interrupts_outside_storage` for Ctrl-C when SIGINT has Python's default handler (the caller's own
    handler, e.g. the CLI's, is left alone); a no-op otherwise."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        return interrupts_outside_storage()
    return contextlib.nullcontext()
