"""Start a search study from another one's trials (``rope_adapter.search.copy_trials``), then check that the copies
still hold: the current code re-scores the first racing stage of the copied unscaled-model trial and the result is
compared, sample by sample, with the stored scores. Writes ``copy_check.json`` in the new study's folder.

Usage (the Qwen GP study, from the old NSGA-II one):

    python benchmarks/copy_study.py --source sqlite:///benchmarks/results/search_qwen_50pairs/study.db \\
        --source-study lrs-search -- <the search flags of the new study>
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from search_args import parse_with_search_flags

from rope_adapter import files
from rope_adapter.search import copy_trials
from rope_adapter.search.storage import TRIAL_ATTR
from rope_adapter.search.worker import make_worker


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", required=True, help="storage URL of the study to copy from")
    p.add_argument("--source-study", default="lrs-search")
    args, settings = parse_with_search_flags(p, argv)
    summary = copy_trials(settings, args.source, args.source_study)
    print(f"copied {summary['copied']} trials; skipped {summary['skipped']}; enqueued {summary['enqueued']}")

    import optuna

    study = optuna.load_study(study_name=settings.study.name, storage=settings.storage_url())
    base = next(t for t in study.trials if t.user_attrs.get("baseline") == "base")
    stored = np.asarray(base.user_attrs[TRIAL_ATTR]["sample_scores"])
    worker = make_worker(settings, 0, with_holdout=False)
    start = time.perf_counter()
    rescored = worker.evaluator.score(np.ones(worker.num_layers), worker.stages[0]).per_sample
    n = len(rescored)
    diff = np.abs(rescored - stored[:n])
    check = {
        **summary,
        "checked_trial": base.number,
        "samples_rescored": n,
        "max_abs_difference": float(diff.max()),
        "same_accuracy_verdicts": int(np.sum(np.floor(rescored) == np.floor(stored[:n]))),
        "seconds": time.perf_counter() - start,
    }
    out = Path(settings.out) / "copy_check.json"
    files.write_json(out, check, indent=2)
    print(files.dumps_json(check, indent=2))
    return 0 if check["same_accuracy_verdicts"] == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
