"""Ctrl-C and SIGTERM during a search: one line, exit status 130, no running trial left behind, an interrupted
baseline run again on resume; a closed pipe ends a command quietly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.searches import complete, load_trials, small, start_cli


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir) -> Path:
    return tiny_llama_dir


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_search_is_one_line_and_leaves_no_running_trial(tmp_path, model_dir, sig):
    settings = small(tmp_path / "s", model_dir, trials=400)
    process = start_cli(settings)
    try:
        while len(complete(load_trials(settings))) < 2:
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        process.send_signal(sig)
        _, stderr = process.communicate()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("rope-adapter: interrupted: the study keeps its finished")
    trials = load_trials(settings)
    states = {t.state.name for t in trials}
    assert "RUNNING" not in states, states
    # resumed, every baseline is scored, the one the signal interrupted included (it is enqueued again)
    baselines = {t.user_attrs["uniform"] for t in trials if "baseline" in t.user_attrs}
    assert {1.0, *settings.uniform_values()} <= baselines
    resumed = settings.updated(trials=len(complete(trials)) + len(baselines))
    restart = start_cli(resumed)
    _, stderr = restart.communicate()
    assert restart.returncode == 0, stderr
    scored = {t.user_attrs.get("uniform") for t in complete(load_trials(resumed)) if "baseline" in t.user_attrs}
    assert scored == baselines


def test_info_into_a_closed_pipe_is_quiet(tmp_path):
    from testkit.card_folders import make_adapter

    adapter = make_adapter(tmp_path / "adapter", results=False)
    info = subprocess.Popen(
        [sys.executable, "-m", "rope_adapter.cli", "info", str(adapter)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    head = subprocess.run(["head", "-c", "1"], stdin=info.stdout, capture_output=True)
    info.stdout.close()
    _, stderr = info.communicate()
    assert head.stdout and info.returncode == 0, stderr
    assert b"BrokenPipeError" not in stderr and b"Traceback" not in stderr, stderr
