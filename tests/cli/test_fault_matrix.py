"""The fault-injection harness (testkit/faults.py) on a seeded sample of its matrix, every test run: each cell runs a
`rope-adapter` command on tiny models in a process of its own, with a umask, an existing output, a full disk or a
signal at the Nth write, and must keep every invariant (the user's files byte for byte, no temporary left, strict
JSON, modes from the umask, status 0/2/130 and one line). ``benchmarks/fault_matrix.py`` runs the whole matrix."""

from __future__ import annotations

import os

import pytest
from testkit.faults import COMMANDS, Cell, Runner, make_inputs, run_cell, sample

from rope_adapter.cli import SUBCOMMANDS

FAST = ("info", "card", "push", "analyze", "compare", "export")
"""Commands whose runs take well under a second once the runner has imported the command line."""

SEED = int(os.environ.get("ROPE_ADAPTER_FAULT_SEED", "32"))
"""The sample's seed (fixed, so a failure reruns the same cells; set the variable to try others)."""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    template = make_inputs(tmp_path_factory.mktemp("fault-template"))
    with Runner() as runner:
        yield template, tmp_path_factory.mktemp("fault-runs"), runner


def test_the_matrix_covers_every_command():
    assert sorted(COMMANDS) == sorted(SUBCOMMANDS)


FOUND = [
    Cell("analyze", 0o027, "none", "sigterm", 5),  # was: killed, a .decay.json.*.tmp left, no message
    Cell("analyze", 0o077, "none", "enospc", 5),  # was: a traceback and status 1
    Cell("card", 0o027, "none", "sigterm", 2),
    Cell("demo", 0o027, "none", "enospc", 48),  # was: the search step's error line, then the demo's own: two lines
]
"""Cells that broke an invariant before the command line handled SIGTERM and file-system errors for every command."""


@pytest.mark.parametrize("cell", [*FOUND, *sample(SEED, 3, FAST)], ids=lambda c: c.label)
def test_a_cell_keeps_every_invariant(harness, cell):
    template, workdir, runner = harness
    outcome = run_cell(cell, template, workdir, runner)
    assert outcome.violations == [], (outcome.message, outcome.violations)
    if cell.fault != "none" and outcome.fired:
        assert outcome.rc == (2 if cell.fault == "enospc" else 130), outcome.message


def test_a_message_with_a_newline_stays_one_line(tmp_path, capsys):
    from rope_adapter.cli import main

    odd = tmp_path / "two\nlines"
    assert main(["info", str(odd)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("rope-adapter: error: ") and "two\\nlines" in err, err
