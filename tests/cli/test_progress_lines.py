"""Long commands show progress in a log file too: with ``--no-progress`` (no bars) ``search`` writes a line per
finished trial and per finished part of its confirmation and held-out records, ``eval`` a line per part of
records (tested with its checkpoint: tests/evaluate/test_eval_checkpoint.py)."""

from __future__ import annotations

import logging
import re

from rope_adapter.cli import main
from rope_adapter.cli.search import SEARCH_LOGGER


def test_search_without_bars_writes_a_line_per_trial_and_part(tiny_llama_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=SEARCH_LOGGER)
    argv = ["search", "--model", str(tiny_llama_dir), "--pairs", "3", "--num-positions", "3",
            "--search-records", "2", "--holdout-records", "2", "--confirm-top", "1", "--confirm-records", "2",
            "--trials", "4", "--s-min", "1.0", "--s-max", "1.5", "--uniform", "1.2", "--device", "cpu",
            "--no-progress", "--out", str(tmp_path / "search")]  # fmt: skip
    assert main(argv) == 0
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(SEARCH_LOGGER)]
    trials = [line for line in lines if line.startswith("search trials:")]
    assert [int(re.match(r"search trials: (\d+) of 4 finished", line)[1]) for line in trials] == [1, 2, 3, 4]
    for phase in ("confirmation records", "held-out records"):
        parts = [re.match(rf"{phase}: (\d+) of (\d+) parts scored \(\d+ s\)$", x) for x in lines if x.startswith(phase)]
        assert parts and all(parts), lines
        assert [int(m[1]) for m in parts] == list(range(1, int(parts[0][2]) + 1))  # every part, up to the total
