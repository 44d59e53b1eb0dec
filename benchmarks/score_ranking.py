"""Which search score ranks a study's trials closest to their held-out accuracy (issue 17, item 2)?

For up to ``--trials`` scored trials of an existing study (spread over its range of search-set means), the current
code re-scores each trial's factors on the study's search records and on its held-out records, in one
teacher-forced pass each, and computes from the same pass every candidate score on the search records:

- ``answer``: teacher-forced accuracy + 0.01 x answer log-prob (the search's default);
- ``tf_accuracy``: teacher-forced accuracy alone (0/1 per sample);
- ``soft@T``: sigmoid(smallest answer-token logit margin / T), T in ``--temperatures``;
- ``margin@C``: the smallest margin clipped to [-C, C];
- ``logprob``: mean answer log-prob.

Each candidate is averaged over gold positions (the search's "mean" objective) and ranked against the held-out
teacher-forced accuracy (mean over positions) with Spearman's rho and Kendall's tau over trials, with a bootstrap
interval over trials; every candidate is also compared with ``answer`` (the default) on the same bootstrap draws,
so the difference in rho gets a paired interval. Writes ``score_ranking.json``, ``score_ranking.md`` and
``score_ranking.png`` (each trial's search score against its held-out accuracy) in ``--out``; each re-scored trial is
appended to ``trials.jsonl`` there as it ends, and a rerun of the same command scores only the missing ones.
``--report-only`` writes the report from ``trials.jsonl`` without loading the model.

    .venv/bin/python benchmarks/score_ranking.py --storage sqlite:///benchmarks/results/search_smollm2_10pairs/study.db \\
        --trials 24 --out benchmarks/results/score_ranking_smollm2_10pairs -- <the study's search flags>
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from scipy import stats
from search_args import parse_with_search_flags
from tqdm.auto import tqdm

from rope_adapter import files
from rope_adapter.json_types import JsonObject
from rope_adapter.records import loads_json
from rope_adapter.scoring.logprobs import position_means
from rope_adapter.search.objective import answer_score, soft_score
from rope_adapter.search.storage import TRIAL_ATTR
from rope_adapter.search.worker import make_worker


def pick_trials(study: optuna.Study, count: int) -> list[Any]:
    """Up to ``count`` distinct scored trials, spread evenly over the sorted search-set means (baselines kept)."""
    seen, scored = set(), []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        info = t.user_attrs.get(TRIAL_ATTR) or {}
        if not info.get("evaluated") or info.get("duplicate_of") is not None or info.get("factors") is None:
            continue
        key = tuple(round(f, 6) for f in info["factors"])
        if key not in seen:
            seen.add(key)
            scored.append(t)
    scored.sort(key=lambda t: t.values[0])
    if len(scored) <= count:
        return scored
    return [scored[int(round(i))] for i in np.linspace(0, len(scored) - 1, count)]


def candidates(lp: Any, positions: np.ndarray, temperatures: list[float], clips: list[float]) -> dict[str, float]:
    """Every candidate score's mean over gold positions, from one TokenLogprobs."""
    exact = lp.exact().astype(np.float64)
    logprob = lp.mean(None)
    margin = lp.min_margin()
    per_sample = {"answer": answer_score(exact, logprob), "tf_accuracy": exact, "logprob": logprob}
    for t in temperatures:
        per_sample[f"soft@{t:g}"] = soft_score(margin, t)
    for c in clips:
        per_sample[f"margin@{c:g}"] = np.clip(margin, -c, c)
    return {k: float(np.mean(list(position_means(positions, v).values()))) for k, v in per_sample.items()}


def _spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of ``x`` against the same row of ``y`` (average ranks for ties); NaN for a row
    where either side is constant (no ranking to compare). Rows are bootstrap draws, computed at once."""
    rx = stats.rankdata(np.atleast_2d(x), axis=1)
    ry = stats.rankdata(np.atleast_2d(y), axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    denom = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(axis=1) / denom
    return np.where(denom > 0, rho, np.nan)


def rank_agreement(
    scores: dict[str, np.ndarray], target: np.ndarray, reference: str = "answer", seed: int = 0, resamples: int = 2000
) -> dict[str, dict[str, Any]]:
    """Each score's Spearman rho and Kendall tau against ``target`` over trials, with percentile bootstrap intervals.

    Every score is resampled on the same bootstrap draws of trials, so ``vs_reference`` (rho minus the
    ``reference`` score's rho, with its interval and the share of draws where the score ranks strictly better) is
    a paired comparison: two scores whose intervals overlap can still differ reliably, or not at all.
    """
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(target), (resamples, len(target)))
    boot = {n: _spearman(x[draws], target[draws]) for n, x in scores.items()}
    rhos = {n: float(_spearman(x, target)[0]) for n, x in scores.items()}
    out: dict[str, dict[str, Any]] = {}
    for n, x in scores.items():
        low, high = np.nanpercentile(boot[n], [2.5, 97.5]) if np.isfinite(boot[n]).any() else (np.nan, np.nan)
        rho = rhos[n]
        row: dict[str, Any] = {
            "spearman": rho,
            "spearman_ci": [float(low), float(high)],
            "kendall": float(stats.kendalltau(x, target).statistic) if np.isfinite(rho) else float("nan"),
        }
        if reference in scores and n != reference:
            diff = boot[n] - boot[reference]
            diff = diff[np.isfinite(diff)]
            lo, hi = np.percentile(diff, [2.5, 97.5]) if len(diff) else (np.nan, np.nan)
            row["vs_reference"] = {
                "reference": reference,
                "difference": rho - rhos[reference],
                "difference_ci": [float(lo), float(hi)],
                "share_better": float(np.mean(diff > 0)) if len(diff) else float("nan"),
            }
        out[n] = row
    return out


def rank_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`rank_agreement` of every candidate score of ``trials.jsonl`` rows against their held-out accuracy."""
    target = np.array([r["holdout_tf_accuracy"] for r in rows])
    return rank_agreement({n: np.array([r["search"][n] for r in rows]) for n in rows[0]["search"]}, target)


def agreement_table(agreement: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown rows of :func:`rank_agreement`'s result, best Spearman first."""
    lines = [
        "| search score | Spearman rho [95 % bootstrap over trials] | Kendall tau "
        "| rho - answer's [95 %], paired | draws ranking better than answer |",
        "|---|---|---|---|---|",
    ]
    for n, a in sorted(agreement.items(), key=lambda kv: -kv[1]["spearman"]):
        lo, hi = a["spearman_ci"]
        vs = a.get("vs_reference")
        paired = (
            f"{vs['difference']:+.3f} [{vs['difference_ci'][0]:+.3f}, {vs['difference_ci'][1]:+.3f}] "
            f"| {vs['share_better']:.0%}"
            if vs
            else "(reference) | -"
        )
        lines.append(f"| {n} | {a['spearman']:+.3f} [{lo:+.3f}, {hi:+.3f}] | {a['kendall']:+.3f} | {paired} |")
    return lines


def plot_ranking(rows: list[dict[str, Any]], agreement: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """One panel per headline score (``answer``, ``tf_accuracy``, then the best soft and margin score): each trial's
    search-set score against its held-out accuracy, baselines marked, the panel titled with its Spearman rho."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("answer", "tf_accuracy") if n in agreement]
    for prefix in ("soft@", "margin@"):
        family = [n for n in agreement if n.startswith(prefix) and np.isfinite(agreement[n]["spearman"])]
        if family:
            names.append(max(family, key=lambda n: agreement[n]["spearman"]))
    held = np.array([r["holdout_tf_accuracy"] for r in rows])
    base = np.array([r.get("baseline") is not None for r in rows])
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        x = np.array([r["search"][name] for r in rows])
        ax.scatter(x[~base], held[~base], s=22, label="searched curve")
        if base.any():
            ax.scatter(x[base], held[base], s=30, marker="s", label="baseline (base / uniform)")
        lo, hi = agreement[name]["spearman_ci"]
        ax.set_title(f"{name}: rho {agreement[name]['spearman']:+.2f} [{lo:+.2f}, {hi:+.2f}]", fontsize=9)
        ax.set_xlabel(f"search-set {name}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out accuracy")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Search score against held-out accuracy, {len(rows)} trials: {title}", fontsize=10)
    fig.tight_layout()
    files.save_figure(fig, path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", required=True, help="storage URL of the study")
    p.add_argument("--study", default="lrs-search")
    p.add_argument("--trials", type=int, default=24)
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 4.0])
    p.add_argument("--clips", type=float, nargs="+", default=[1.0, 3.0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--report-only", action="store_true", help="score nothing: report the trials scored so far")
    args, settings = parse_with_search_flags(p, argv)
    study = optuna.load_study(study_name=args.study, storage=args.storage)
    trials = pick_trials(study, args.trials)
    args.out.mkdir(parents=True, exist_ok=True)
    done_file = args.out / "trials.jsonl"  # one row per re-scored trial, appended as it ends: a rerun resumes
    done = {}
    if done_file.is_file():
        for n, line in enumerate(done_file.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                row = loads_json(line, done_file, JsonObject, field=f"line {n}")
                # rows of runs before the dtype was recorded carry none: their result folder's README names it
                if row.get("dtype", settings.model.dtype) != settings.model.dtype:
                    print(
                        f"{done_file} holds trials re-scored in {row['dtype']}, and this run scores in "
                        f"{settings.model.dtype}: one ranking must not mix dtypes; give another --out",
                        file=sys.stderr,
                    )
                    return 2
                done[row["trial"]] = row
    start = time.perf_counter()
    # bit-reversed order: a run stopped early has still scored trials spread over the whole range of means
    order = sorted(range(len(trials)), key=lambda i: f"{i:016b}"[::-1])
    todo = [] if args.report_only else [trials[i] for i in order if trials[i].number not in done]
    holdout_records = settings.holdout_records
    if todo:  # the model loads only when there is something to score
        worker = make_worker(settings, 0, with_holdout=True)
        search_pos, held_pos = worker.search.positions, worker.holdout.positions
        holdout_records = len(set(s.record_id for s in worker.holdout.samples))
    for t in tqdm(todo, desc="trials", file=sys.stderr):
        factors = t.user_attrs[TRIAL_ATTR]["factors"]
        began = time.perf_counter()
        search = worker.evaluator.score(factors, worker.search, keep_logprobs=True).logprobs
        held = worker.evaluator.score(factors, worker.holdout, keep_logprobs=True).logprobs
        held_acc = position_means(held_pos, held.exact().astype(np.float64))
        row = done[t.number] = {
            "trial": t.number,
            "dtype": settings.model.dtype,
            "baseline": t.user_attrs.get("baseline"),
            "raced_out": bool(t.user_attrs.get(TRIAL_ATTR, {}).get("raced_out")),
            "stored_search_mean": t.values[0],
            "search": candidates(search, search_pos, args.temperatures, args.clips),
            "holdout_tf_accuracy": float(np.mean(list(held_acc.values()))),
            "holdout_tf_accuracy_by_position": {str(k): v for k, v in held_acc.items()},
            "seconds": time.perf_counter() - began,
        }
        files.append_text(done_file, files.dumps_json(row, where=done_file) + "\n")
    # the report orders trials by their search-set mean, however the rows were resumed: the same rows give the same
    # bootstrap draws, so a --report-only rerun reproduces the intervals of the run that scored them
    rows = [done[t.number] for t in trials if t.number in done]
    if len(rows) < 3:
        print(f"{len(rows)} trials scored so far: too few to rank")
        return 1
    target = np.array([r["holdout_tf_accuracy"] for r in rows])
    agreement = rank_rows(rows)
    # trials tied at the lowest held-out accuracy (all 0 on a model that fails) reward any score that ties them too:
    # the ranking among the others says whether a score orders the trials that differ
    above = [r for r in rows if r["holdout_tf_accuracy"] > target.min()]
    floor_ties = len(rows) - len(above)
    above_floor = None
    if floor_ties >= 2 and len(above) >= 3:
        above_floor = rank_rows(above)
    data = {
        "study": {"storage": args.storage.rsplit("/", 1)[-1], "name": args.study, "trials_scored": len(rows)},
        "settings": {
            "model": settings.model.name,
            "pairs": settings.task.pairs,
            "search_records": settings.search_records,
            "dtype": settings.model.dtype,
        },
        "holdout_records": holdout_records,
        "seconds_this_run": time.perf_counter() - start,
        "seconds_rescoring": sum(r.get("seconds", 0.0) for r in rows),
        "trials_without_seconds": sum("seconds" not in r for r in rows),
        "agreement": agreement,
        "floor_ties": floor_ties,
        "agreement_above_floor": above_floor,
        "trials": rows,
    }
    files.write_json((args.out / "score_ranking.json"), files.null_non_finite(data), indent=1)
    best = max(agreement, key=lambda n: agreement[n]["spearman"])
    timing = f"re-scoring {data['seconds_rescoring']:.0f} s"
    if data["trials_without_seconds"]:
        timing += f", not recorded for {data['trials_without_seconds']} trials"
    lines = [
        f"# Which search score ranks trials like their held-out accuracy: {settings.model.name}, {settings.task.pairs} pairs",
        "",
        f"{len(rows)} distinct scored trials of study `{args.study}`, spread over its search-set means; each re-scored "
        f"on the {settings.search_records} search records and the {data['holdout_records']} held-out records "
        f"({timing}, {settings.model.dtype}). Target: held-out teacher-forced accuracy, mean over gold positions (range "
        f"{target.min():.3f} - {target.max():.3f}). Command: `benchmarks/score_ranking.py` (docstring).",
        "",
        *agreement_table(agreement),
        "",
        f"Highest rank agreement: **{best}**. The paired columns resample the same trials for every score: an "
        "interval that holds 0 means this many trials cannot tell the score from `answer` (the default).",
    ]
    if above_floor is not None:
        lines += [
            "",
            f"## The {len(above)} trials above the lowest held-out accuracy",
            "",
            f"{floor_ties} trials tie at the lowest held-out accuracy ({target.min():.3f}). A score that ties them too "
            "(teacher-forced accuracy at 0) gains rank agreement there without ordering any trial better; among the "
            "others:",
            "",
            *agreement_table(above_floor),
        ]
    plot_ranking(rows, agreement, args.out / "score_ranking.png", f"{settings.model.name}, {settings.task.pairs} pairs")
    lines += ["", "![search score against held-out accuracy, one point per trial](score_ranking.png)"]
    files.write_text((args.out / "score_ranking.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
