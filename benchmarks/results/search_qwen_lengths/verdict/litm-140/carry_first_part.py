"""Carry the 140-key base run's first kept part into the 16-record run (a record of what was done, run once).

The verdict's 140-key set was cut from 40 to 16 records before any of its scores was read (the study README says
why). The 16 records are the first 16 of the same seeded draw, so the base run's first kept part (8 records, scored
under ``--num-samples 40``) is the same records, gold positions, tokens and batches. This script computes both runs'
identities with ``eval``'s own code (stopping before the model loads), checks that the 40-record identity is the kept
file's and that part 0's samples are equal, and re-stamps the file for the 16-record run.

    python carry_first_part.py LITM_DIR      # from the repository root, with the study's rope-adapter installed
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import rope_adapter.evaluate.run as run_mod
from rope_adapter import files
from rope_adapter.cli import main
from rope_adapter.evaluate.checkpoint import digest, record_parts
from rope_adapter.records import read_json

OUT = "benchmarks/results/search_qwen_lengths/verdict/litm-140/base"
captured: dict[str, Any] = {}


class Stop(Exception):
    """Raised once the run's identity is known."""


class Capture:
    """Stands in for the Checkpoint: keeps the identity and part count, then stops the run."""

    def __init__(self, out: str, run: Any, parts: int) -> None:
        captured.update(run=run, parts=parts)
        raise Stop


def capture_parts(prepared: Any, batch_size: int) -> list[list[int]]:
    captured.update(prepared=prepared, batch=batch_size)
    return record_parts(prepared, batch_size)


def identity(litm: str, records: int) -> dict[str, Any]:
    captured.clear()
    sys.argv = ["rope-adapter", "eval", "--model", "qwen2.5-coder-0.5b-instruct", "--dtype", "bfloat16"]
    sys.argv += ["--threads", "2", "--out", OUT, "--no-progress", "--data", f"{litm}/kv-retrieval-140_keys.jsonl.gz"]
    sys.argv += ["--num-positions", "10", "--num-samples", str(records), "--seed", "0", "--variants", "base"]
    sys.argv += ["--scores", "tf_accuracy,logprob"]
    try:
        main()
    except Stop:
        pass
    return dict(captured)


def carry(litm: str) -> None:
    run_mod.Checkpoint = Capture  # type: ignore[misc,assignment]
    run_mod.record_parts = capture_parts  # type: ignore[assignment]
    a, b = identity(litm, 40), identity(litm, 16)
    path = Path(OUT) / "eval_progress.json"
    kept = read_json(path)
    assert kept["run"] == digest(a["run"]), "the recomputed 40-record identity is not the kept file's"
    assert kept["parts"] == a["parts"] == 5 and b["parts"] == 2
    assert all(a["run"][k] == b["run"][k] for k in ("settings", "model", "scores", "batching"))
    pa, pb = record_parts(a["prepared"], a["batch"]), record_parts(b["prepared"], b["batch"])
    assert pa[0] == pb[0]
    for i in pa[0]:
        sa, sb = a["prepared"].samples[i], b["prepared"].samples[i]
        assert (sa.record_id, sa.position) == (sb.record_id, sb.position)
        assert list(a["prepared"].full_ids[i]) == list(b["prepared"].full_ids[i])
        assert list(a["prepared"].prompt_ids[i]) == list(b["prepared"].prompt_ids[i])
    first = list(dict.fromkeys(s.record_id for s in a["prepared"].samples))[:16]
    assert list(dict.fromkeys(s.record_id for s in b["prepared"].samples)) == first
    new = {"written_by": kept["written_by"], "run": digest(b["run"]), "parts": b["parts"]}
    new["variants"] = {k: v[:1] for k, v in kept["variants"].items()}
    files.write_json(path, new)  # atomically, as the Checkpoint writes it
    print(f"{path}: part 0 ({len(pa[0])} samples) carried into the 16-record run")


if __name__ == "__main__":
    carry(sys.argv[1])
