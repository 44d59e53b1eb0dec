"""Small searches on the tiny model, shared by the search, scoring, export and CLI tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rope_adapter.search import SearchSettings

NUM_LAYERS = 4
"""Layers of the tiny model the ``model_dir`` fixture (tests/conftest.py) saves."""


def small(out: Path, model_dir: Path, **overrides) -> SearchSettings:
    """Settings of a small, fast search on the tiny model."""
    kw = {
        "model": str(model_dir),
        "pairs": 3,
        "num_positions": 3,
        "search_records": 3,
        "holdout_records": 2,
        "trials": 10,
        "population": 4,
        "s_min": 1.0,
        "s_max": 1.5,
        "device": "cpu",
        "out": str(out),
        "progress": False,
        "heartbeat": 10,  # stale only after 20 s: a busy CI machine must not make a running trial look dead
        "confirm_records": 4,  # confirmation on a few records: fast, and it still runs in every small search
    }
    return SearchSettings.flat(**{**kw, **overrides})


def cli_args(settings: SearchSettings) -> list[str]:
    """The command line of the settings used by the subprocess tests."""
    args = [
        "--model", settings.model.name, "--pairs", str(settings.task.pairs), "--num-positions", str(settings.task.num_positions),
        "--search-records", str(settings.search_records), "--holdout-records", str(settings.holdout_records),
        "--trials", str(settings.study.trials), "--population", str(settings.study.population), "--s-max", str(settings.space.s_max),
        "--device", "cpu", "--out", settings.out, "--heartbeat", str(settings.study.heartbeat), "--no-progress",
        "--workers", str(settings.study.workers), "--study", settings.study.name,
        "--confirm-top", str(settings.confirm_top), "--confirm-records", str(settings.confirm_records),
    ]  # fmt: skip
    if settings.study.sampler:
        args += ["--sampler", settings.study.sampler]
    if settings.study.storage:
        args += ["--storage", settings.study.storage]
    return args


def start_cli(settings: SearchSettings) -> subprocess.Popen:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    return subprocess.Popen(
        [sys.executable, "-m", "rope_adapter.cli", "search", *cli_args(settings)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    """A process started with SIGINT ignored (a pytest-xdist worker, ``nohup``, ``cmd &``) passes that on, and Python
    then never raises KeyboardInterrupt: the search under test gets the default, as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def load_trials(settings: SearchSettings):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = settings.storage_url()
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).is_file():
        return []  # the search process has not created its study file yet
    try:
        storage = optuna.storages.RDBStorage(url, skip_table_creation=True)
        return optuna.load_study(study_name=settings.study.name, storage=storage).get_trials(deepcopy=False)
    except KeyError:  # no such study yet
        return []
    except Exception as exc:
        # the search process creates the schema meanwhile: tables missing, locked, or both processes inserting
        # the schema's version row (Optuna's RDBStorage writes it even with skip_table_creation)
        text = f"{exc} {exc.__cause__ or ''} {exc.__context__ or ''}"
        if any(m in text for m in ("no such table", "database is locked", "UNIQUE constraint failed")):
            return []
        raise


def complete(trials):
    return [t for t in trials if t.state.name == "COMPLETE"]


def two_workers(settings: SearchSettings) -> None:
    process = start_cli(settings)
    _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    trials = load_trials(settings)
    done = complete(trials)
    assert len(done) >= settings.study.trials
    # Every trial was run by one of the two workers of this one study. Which of them ran how many is not part of
    # the design (one worker may finish all trials before the other has loaded its model), so it is not asserted.
    # a worker is "host:pid:wN": every trial by w0 or w1, each worker one process, and no two workers share one
    runs = {tuple(t.user_attrs["lrs"]["worker"].rsplit(":", 1)) for t in done}
    workers = {label for _, label in runs}
    assert workers and workers <= {"w0", "w1"}, workers
    assert len(runs) == len(workers) == len({host_pid for host_pid, _ in runs}), runs
    baselines = [t for t in trials if t.user_attrs.get("baseline")]
    assert len([t for t in baselines if t.user_attrs["uniform"] == 1.0]) == 1  # enqueued once, not per worker
    assert (Path(settings.out) / "adapter" / "adapter_config.json").is_file()
