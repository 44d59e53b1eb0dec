"""An interrupt never lands inside a storage call (search/interrupts.py): it waits until the call returns, and a
second signal while one waits interrupts at once. Found by the suite in session 23: a SIGTERM that landed while a
trial was being written left SQLite's lock held, and the search ended 60 s later in "database is locked"."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from rope_adapter.search import interrupts
from rope_adapter.search.interrupts import in_storage_call, interrupts_outside_storage, storage_safe_interrupts

# code that runs "inside a storage call": its module name is one of interrupts.STORAGE_MODULES
STORAGE_CODE = """
import os, signal

def write(done, signals):
    for _ in range(signals):
        os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(200000):  # bytecodes where Python would otherwise raise the interrupt
        pass
    done.append("written")

def here():
    import sys
    return sys._getframe()
"""


def _storage_module(name: str = "sqlalchemy.orm.fake_for_tests") -> dict:
    namespace = {"__name__": name}
    exec(compile(STORAGE_CODE, name, "exec"), namespace)
    return namespace


def _wait_for_the_interrupt() -> None:
    for _ in range(60000):  # the deferred interrupt comes within RECHECK_SECONDS; this only ends a broken test
        time.sleep(0.01)
    pytest.fail("the deferred interrupt never came")


def test_storage_frames_are_recognised_by_module_name():
    assert in_storage_call(_storage_module()["here"]())
    assert not in_storage_call(_storage_module("sqlalchemy_other")["here"]())  # a prefix, not the package
    assert not in_storage_call(sys._getframe())
    assert not in_storage_call(None)


def test_an_interrupt_inside_a_storage_call_waits_until_it_returns():
    storage = _storage_module()
    done: list[str] = []
    after: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupts_outside_storage((signal.SIGTERM,)):
        storage["write"](done, 1)
        after.append("returned")
        _wait_for_the_interrupt()
    assert done == ["written"]  # the storage call ran to its end
    assert after == ["returned"]


def test_an_interrupt_outside_storage_is_at_once():
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupts_outside_storage((signal.SIGTERM,)):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200000):
            pass
        done.append("not reached")
    assert done == []


def test_a_second_signal_while_one_waits_interrupts_the_storage_call():
    storage = _storage_module()
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupts_outside_storage((signal.SIGTERM,)):
        storage["write"](done, 2)
    assert done == []


def test_the_previous_handlers_come_back_and_a_callers_own_handler_is_kept():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with interrupts_outside_storage((signal.SIGTERM,)):
        assert signal.getsignal(signal.SIGTERM) is not before[0]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before

    def own(signum, frame):
        pass

    previous = signal.signal(signal.SIGINT, own)
    try:
        with storage_safe_interrupts():
            assert signal.getsignal(signal.SIGINT) is own  # run_search leaves the caller's handler alone
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_modules_named_cover_optunas_storages_and_the_drivers():
    for name in ("sqlalchemy", "sqlite3", "psycopg2", "optuna.storages"):
        assert name in interrupts.STORAGE_MODULES


def test_a_signal_during_a_real_sqlite_write_leaves_the_trial_written_and_no_lock(tmp_path):
    """The case the suite found, made certain: SIGTERM arrives while Optuna is writing a trial's values to SQLite.
    The write finishes, the interrupt follows it, and no lock is left (another connection writes at once)."""
    import sqlite3

    import optuna
    from sqlalchemy import event

    from rope_adapter.search.storage_url import open_storage

    path = tmp_path / "study.db"
    storage = open_storage(f"sqlite:///{path}")
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    fired: list[str] = []

    @event.listens_for(storage.engine, "before_cursor_execute")
    def signal_mid_write(conn, cursor, statement, parameters, context, executemany):
        if not fired and statement.lstrip().upper().startswith(("INSERT INTO TRIAL_VALUES", "UPDATE TRIALS")):
            fired.append(statement)
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt), interrupts_outside_storage((signal.SIGTERM,)):
        study.tell(trial, 1.0)
        _wait_for_the_interrupt()
    assert fired
    assert study.trials[0].state == optuna.trial.TrialState.COMPLETE and study.trials[0].value == 1.0
    other = sqlite3.connect(path)
    other.execute("PRAGMA busy_timeout = 0")  # a lock still held makes BEGIN IMMEDIATE fail at once
    other.execute("BEGIN IMMEDIATE")
    other.rollback()
    other.close()
