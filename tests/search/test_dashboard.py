"""A search's study read back through optuna-dashboard's HTTP API, as a user watching it live would see it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from testkit.searches import small

from rope_adapter.search import run_search

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed (pip install optuna-dashboard)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(server: subprocess.Popen, port: int) -> None:
    """Until the server accepts a connection (the event itself, not its log line), or has exited."""
    while server.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("optuna-dashboard exited before it accepted a connection")


def _get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as response:
        return json.loads(response.read())


def test_dashboard_shows_the_study_with_named_objectives(tmp_path, model_dir):
    settings = small(tmp_path / "run", model_dir, trials=6)
    run_search(settings)
    port = _free_port()
    url = f"sqlite:///{Path(settings.out).resolve() / 'study.db'}"
    command = [sys.executable, "-m", "optuna_dashboard._cli", url, "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(server, port)  # "Listening on" is printed before the socket accepts (issue 18)
        summaries = _get(port, "/api/studies")["study_summaries"]
        (study,) = [s for s in summaries if s["study_name"] == settings.study.name]
        assert study["directions"] == ["maximize", "maximize"]
        detail = _get(port, f"/api/studies/{study['study_id']}")
        assert detail["objective_names"] == ["mean", "worst"]
        trials = detail["trials"]
        assert len([t for t in trials if t["state"] == "Complete"]) >= settings.study.trials
        attrs = {a["key"]: a["value"] for a in trials[0]["user_attrs"]}
        assert attrs["baseline"] == "base" and json.loads(attrs["factors"]) == [1.0] * 4
        assert {"accuracy", "records_scored", "raced_out", "feasible", "lrs"} <= set(attrs)
        assert any(t.get("values") for t in trials)
    finally:
        server.terminate()
        server.wait()
