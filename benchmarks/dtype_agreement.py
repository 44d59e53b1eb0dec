"""Would a search scored in another dtype (bfloat16 on a CPU with AMX) rank curves like the float32 study does?

For a few trials of an existing study (the base trial, the best uniform factor, the best searched curve...), the
current code re-scores each trial's factors on the study's first racing stage of search records, in the dtype
the search flags give (``--dtype bfloat16``), and compares the per-sample scores with the float32 ones the study
stored (``sample_scores``): how often the benchmark's verdict (teacher-forced exact match) agrees, how far the
scores move, and whether the trials keep their order. Also times one forward pass of a record's length in both
dtypes on this machine (tokens per second). Writes ``<out>/<out name>.json`` and ``.md``.

    .venv/bin/python benchmarks/dtype_agreement.py --storage sqlite:///<copy of study.db> --trials 0 3 12 \\
        --out benchmarks/results/dtype_agreement_qwen_50pairs -- <the study's search flags> --dtype bfloat16
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import torch
from result_files import write_summary
from search_args import parse_with_search_flags

from rope_adapter import files
from rope_adapter.search.storage import TRIAL_ATTR
from rope_adapter.search.worker import make_worker


def tokens_per_second(model: torch.nn.Module, length: int, dtype: torch.dtype) -> float:
    """One forward pass of ``length`` random tokens in ``dtype`` (after a short warm-up)."""
    original = next(model.parameters()).dtype
    model.to(dtype)
    ids = torch.randint(100, 20000, (1, length))
    with torch.inference_mode():
        model(ids[:, :128])
        start = time.perf_counter()
        model(ids)
        seconds = time.perf_counter() - start
    model.to(original)
    return length / seconds


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", required=True, help="storage URL of the float32 study (a copy: Optuna may write)")
    p.add_argument("--study", default="lrs-search")
    p.add_argument("--trials", type=int, nargs="+", required=True, help="trial numbers to re-score")
    p.add_argument("--out", type=Path, required=True, help="result folder")
    args, settings = parse_with_search_flags(p, argv)
    study = optuna.load_study(study_name=args.study, storage=args.storage)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    worker = make_worker(settings, 0, with_holdout=False)
    stage = worker.stages[0]
    n = len(stage)
    rows = []
    for number in args.trials:
        info = by_number[number].user_attrs[TRIAL_ATTR]
        stored = np.asarray(info["sample_scores"][:n], dtype=np.float64)
        scored = worker.evaluator.score(info["factors"], stage)
        new = np.asarray(scored.per_sample, dtype=np.float64)
        exact_old, exact_new = stored >= 0.5, new >= 0.5  # answer score = exact + 0.01 x log-prob (> -0.5)
        rows.append(
            {
                "trial": number,
                "baseline": by_number[number].user_attrs.get("baseline"),
                "samples": n,
                "float32_mean": float(stored.mean()),
                "other_mean": float(new.mean()),
                "verdicts_agree": float((exact_old == exact_new).mean()),
                "verdict_flips": int((exact_old != exact_new).sum()),
                "max_abs_score_change": float(np.abs(stored - new).max()),
                "seconds": scored.seconds,
            }
        )
        print(files.dumps_json(rows[-1]), flush=True)
    model = worker.model.get_base_model()
    length = max(len(ids) for ids in stage.full_ids)
    speed = {
        str(d).removeprefix("torch."): tokens_per_second(model, length, d) for d in (torch.float32, torch.bfloat16)
    }
    order_old = [r["trial"] for r in sorted(rows, key=lambda r: -r["float32_mean"])]
    order_new = [r["trial"] for r in sorted(rows, key=lambda r: -r["other_mean"])]
    data = {
        "study": args.storage.rsplit("/", 1)[-1],
        "dtype": worker.dtype,
        "threads": settings.model.threads,
        "model": settings.model.name,
        "pairs": settings.task.pairs,
        "stage_records": worker.stage_ends[0],
        "tokens_per_second": speed,
        "same_order": order_old == order_new,
        "order_float32": order_old,
        "order_other": order_new,
        "trials": rows,
    }
    lines = [
        f"# Scores in {worker.dtype} against the float32 study: {settings.model.name}, {settings.task.pairs} pairs",
        "",
        f"The first racing stage ({worker.stage_ends[0]} search records, {n} samples) re-scored in {worker.dtype} "
        f"with the current code, against the float32 per-sample scores the study stored. Command: "
        f"`benchmarks/dtype_agreement.py` (docstring).",
        "",
        f"| trial | kind | float32 mean | {worker.dtype} mean | verdicts agree | flips | largest score change |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['trial']} | {r['baseline'] or 'searched'} | {r['float32_mean']:.4f} | {r['other_mean']:.4f} | "
            f"{r['verdicts_agree']:.3f} | {r['verdict_flips']} | {r['max_abs_score_change']:.4f} |"
        )
    lines += [
        "",
        f"Order of the trials by mean: float32 {order_old}, {worker.dtype} {order_new} "
        f"({'the same' if data['same_order'] else 'different'}).",
        "",
        f"One forward pass of {length} tokens on this machine, {settings.model.threads} thread(s): "
        + ", ".join(f"{k} {v:.0f} tokens/s" for k, v in speed.items())
        + f" ({speed['bfloat16'] / speed['float32']:.1f}x).",
    ]
    write_summary(args.out, data, "\n".join(lines) + "\n", indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
