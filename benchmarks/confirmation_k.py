"""How many top curves to confirm (K) and on how many fresh records (n): a simulation on the committed studies.

No model runs here. Each committed ``study.db`` holds, for every trial scored on all of its search records, the
score of every (record, gold position) sample. A record's score is the mean over its positions (records are the
independent unit; positions of one record share its context). For each study and each (K, n) the choice a search
makes is replayed on bootstrap draws of records (the same draw for every trial, so trials stay paired):

1. a search set of the study's size and a confirmation set of n records are drawn (with replacement) from the
   study's records, independently;
2. the K trials with the best search-set mean are re-scored on the confirmation set and the best of them there is
   chosen (K = 1: the search-set best, what a search without confirmation chooses, re-scored on the n records);
3. the chosen trial's **held-out value** is its mean over all of the study's records (the plug-in truth), its
   **selection gap** is its search-set mean minus that value, and the **reported gap** is its search-set mean
   minus its confirmation mean (what the search report shows).

Searched curves and uniform factors are replayed separately (a search chooses the adapter among searched curves and
the "best uniform" among uniform factors). Scores are the studies' own ``answer`` score; accuracy (its integer
part, 1 when the teacher-forced answer is exact) is reported beside it. Cost is counted in record passes (one
prefix forward pass per record and curve): confirmation costs ``K * n`` per group against ``search_records`` per
fully scored trial.

Also read: ``score_ranking_qwen_50pairs_float32/trials.jsonl`` (12 trials of the Qwen GP study re-scored on its 40
search and 40 held-out records): the held-out accuracy of the trial each K would pick by search score alone, and
the observed gap of the search-set best.

    .venv/bin/python benchmarks/confirmation_k.py      # writes benchmarks/results/confirmation_k/confirmation_k.{json,md}
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from result_files import RESULTS, write_summary

from rope_adapter.json_types import JsonObject
from rope_adapter.records import loads_json

STUDIES = {
    "qwen_50pairs_gp": RESULTS / "search_qwen_50pairs_gp_bf16" / "study.db",
    "qwen_50pairs": RESULTS / "search_qwen_50pairs" / "study.db",
    "smollm2_10pairs": RESULTS / "search_smollm2_10pairs" / "study.db",
}
RESCORED = RESULTS / "score_ranking_qwen_50pairs_float32" / "trials.jsonl"
KS = (1, 2, 3, 4, 5, 6, 8)
NS = (10, 20, 30, 40, 60)
DRAWS = 4000
BUDGET_TRIALS = 5
"""Confirmation may cost at most this many fully scored trials (K * n <= BUDGET_TRIALS * search records) per group."""


def study_matrix(path: Path) -> dict[str, Any]:
    """Per-record mean scores of the fully scored trials: ``{"searched": (trials, records), "uniform": ...}``."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{path}"
    study = optuna.load_study(study_name="lrs-search", storage=optuna.storages.RDBStorage(url))
    settings = study.user_attrs["rope_adapter_search"]
    n_records = int(settings["search_records"])
    groups: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {"searched": [], "uniform": []}
    for trial in study.get_trials(deepcopy=False):
        info = trial.user_attrs.get("lrs") or {}
        scores = info.get("sample_scores")
        if trial.state.name != "COMPLETE" or not info.get("evaluated") or info.get("raced_out") or not scores:
            continue
        if info.get("duplicate_of") is not None or trial.user_attrs.get("baseline") == "base":
            continue
        samples = np.asarray(scores, dtype=np.float64)
        if samples.size % n_records:
            continue
        per_record = samples.reshape(n_records, -1)  # samples are record-major (a record's positions together)
        kind = "uniform" if trial.user_attrs.get("baseline") == "uniform" else "searched"
        groups[kind].append((trial.number, per_record.mean(axis=1), (per_record > 0.5).mean(axis=1)))
    return {
        "records": n_records,
        "positions": int(settings["num_positions"]),
        "groups": {
            k: {
                "trials": [t for t, _, _ in v],
                "score": np.array([s for _, s, _ in v]),
                "accuracy": np.array([a for _, _, a in v]),
            }
            for k, v in groups.items()
        },
    }


def simulate(score: np.ndarray, accuracy: np.ndarray, n_search: int, k: int, n: int, rng: Any) -> dict[str, float]:
    """Expected held-out value, selection gap and reported gap of the chosen trial over :data:`DRAWS` draws."""
    trials, records = score.shape
    k = min(k, trials)
    truth, truth_acc = score.mean(axis=1), accuracy.mean(axis=1)
    search_idx = rng.integers(0, records, size=(DRAWS, n_search))
    confirm_idx = rng.integers(0, records, size=(DRAWS, n))
    search = score[:, search_idx].mean(axis=2).T  # (draws, trials)
    confirm = score[:, confirm_idx].mean(axis=2).T
    top = np.argsort(-search, axis=1, kind="stable")[:, :k]
    best = np.take_along_axis(confirm, top, axis=1).argmax(axis=1)
    chosen = top[np.arange(DRAWS), best]
    rows = np.arange(DRAWS)
    held = truth[chosen]
    return {
        "heldout_score": float(held.mean()),
        "heldout_accuracy": float(truth_acc[chosen].mean()),
        "selection_gap": float((search[rows, chosen] - held).mean()),
        "reported_gap": float((search[rows, chosen] - confirm[rows, chosen]).mean()),
        "confirmation_bias": float((confirm[rows, chosen] - held).mean()),
        "regret": float(truth.max() - held.mean()),
        "p_best": float((chosen == int(truth.argmax())).mean()),
        "cost_records": k * n,
    }


def replay(name: str, path: Path, seed: int) -> dict[str, Any]:
    """Every (K, n) on one study, for searched curves and uniform factors."""
    data = study_matrix(path)
    out: dict[str, Any] = {"study": str(path.relative_to(RESULTS.parent.parent)), "records": data["records"]}
    for kind, group in data["groups"].items():
        trials = len(group["trials"])
        entry: dict[str, Any] = {"trials": trials}
        if trials < 2:
            entry["skipped"] = f"{trials} fully scored trial(s): nothing to choose between"
            out[kind] = entry
            continue
        rng = np.random.default_rng(seed)
        entry["truth_best"] = float(group["score"].mean(axis=1).max())
        entry["truth_mean"] = float(group["score"].mean())
        entry["grid"] = {
            f"{k},{n}": simulate(group["score"], group["accuracy"], data["records"], k, n, rng) for k in KS for n in NS
        }
        out[kind] = entry
    return out


def rescored_check() -> dict[str, Any] | None:
    """The re-scored Qwen trials: the held-out accuracy of the top-K by search score and of the search-set best."""
    if not RESCORED.is_file():
        return None
    lines = enumerate(RESCORED.read_text(encoding="utf-8").splitlines(), 1)
    rows = [loads_json(line, RESCORED, JsonObject, field=f"line {n}") for n, line in lines if line.strip()]
    rows = [r for r in rows if r.get("baseline") != "base"]
    rows.sort(key=lambda r: -r["search"]["answer"])
    best = rows[0]
    return {
        "trials": len(rows),
        "search_best": {
            "trial": best["trial"],
            "search_tf_accuracy": best["search"]["tf_accuracy"],
            "heldout_tf_accuracy": best["holdout_tf_accuracy"],
            "gap": best["search"]["tf_accuracy"] - best["holdout_tf_accuracy"],
        },
        "heldout_best_in_top_k": {
            str(k): max(r["holdout_tf_accuracy"] for r in rows[:k]) for k in KS if k <= len(rows)
        },
        "heldout_best": max(r["holdout_tf_accuracy"] for r in rows),
    }


def recommend(results: dict[str, Any]) -> dict[str, Any]:
    """The (K, n) with the best expected held-out score of the searched curves, averaged over the studies, among
    those that cost at most :data:`BUDGET_TRIALS` fully scored trials (``K * n <= BUDGET_TRIALS * records``); ties
    go to the cheaper one. Also the gain over K = 1 (the search-set best, confirmed on the same n records)."""
    studies = [r for r in results.values() if "grid" in r.get("searched", {})]
    budget = BUDGET_TRIALS * min(r["records"] for r in studies)
    cells = []
    for key in studies[0]["searched"]["grid"]:
        k, n = (int(x) for x in key.split(","))
        if k * n > budget:
            continue
        score = float(np.mean([r["searched"]["grid"][key]["heldout_score"] for r in studies]))
        cells.append((-round(score, 4), k * n, k, n))
    _, cost, k, n = min(cells)
    gain = {
        name: r["searched"]["grid"][f"{k},{n}"]["heldout_score"] - r["searched"]["grid"][f"1,{n}"]["heldout_score"]
        for name, r in results.items()
        if "grid" in r.get("searched", {})
    }
    return {
        "confirm_top": k,
        "confirm_records": n,
        "cost_records": cost,
        "budget_records": budget,
        "gain_over_k1": gain,
    }


def markdown(results: dict[str, Any], check: dict[str, Any] | None, choice: dict[str, Any]) -> str:
    lines = [
        "# Confirmation: how many top curves (K) on how many fresh records (n)",
        "",
        "Made by `benchmarks/confirmation_k.py` from the committed studies (no model run): bootstrap draws of records "
        f"({DRAWS} per cell) replay a search's choice; K = 1 confirms only the search-set best. Held-out = "
        "the chosen trial's mean over all of the study's records; selection gap = its search-set mean minus that; "
        "reported gap = search-set mean minus confirmation mean (what the search report shows). Scores are the "
        "`answer` score (accuracy plus a log-prob tie-break below 0.1); cost in record passes (K x n).",
        "",
    ]
    for name, result in results.items():
        for kind in ("searched", "uniform"):
            entry = result.get(kind, {})
            title = f"## {name}: {kind} ({result['study']}, {entry.get('trials', 0)} fully scored trials)"
            lines += [title, ""]
            if "grid" not in entry:
                lines += [f"Skipped: {entry.get('skipped')}.", ""]
                continue
            lines += [
                f"Best trial's mean over the records: {entry['truth_best']:.3f}; mean of all: {entry['truth_mean']:.3f}.",
                "",
                "| K | n | cost | held-out score | held-out accuracy | P(best) | selection gap | reported gap |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for key, cell in entry["grid"].items():
                k, n = key.split(",")
                lines.append(
                    f"| {k} | {n} | {cell['cost_records']} | {cell['heldout_score']:.3f} | "
                    f"{cell['heldout_accuracy']:.3f} | {cell['p_best']:.2f} | {cell['selection_gap']:+.3f} | "
                    f"{cell['reported_gap']:+.3f} |"
                )
            lines.append("")
    if check:
        sb = check["search_best"]
        lines += [
            "## Check: the 12 re-scored Qwen trials",
            "",
            f"The search-set best (trial {sb['trial']}) has teacher-forced accuracy {sb['search_tf_accuracy']:.3f} on "
            f"the search set and {sb['heldout_tf_accuracy']:.3f} held out (gap {sb['gap']:+.3f}); the best held-out "
            f"accuracy among the {check['trials']} trials is {check['heldout_best']:.3f}. Best held-out accuracy among "
            "the top K by search score: "
            + ", ".join(f"K={k}: {v:.3f}" for k, v in check["heldout_best_in_top_k"].items())
            + ".",
            "",
        ]
    lines += [
        "## Defaults",
        "",
        f"The (K, n) with the best expected held-out score of the searched curves (mean over the studies) among those "
        f"costing at most {BUDGET_TRIALS} fully scored trials ({choice['budget_records']} record passes): "
        f"**K = {choice['confirm_top']}, n = {choice['confirm_records']}** ({choice['cost_records']} record passes per "
        "group). Gain in expected held-out score over confirming only the search-set best on as many records: "
        + ", ".join(f"{name} {g:+.4f}" for name, g in choice["gain_over_k1"].items())
        + ". Confirmation buys little choice on these studies; what it buys is a reported gap that is not the "
        "search set's own selection.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "confirmation_k", help="result folder")
    args = parser.parse_args(argv)
    results = {name: replay(name, path, args.seed) for name, path in STUDIES.items() if path.is_file()}
    check = rescored_check()
    choice = recommend(results)
    data = {"draws": DRAWS, "seed": args.seed, "studies": results, "rescored_check": check, "recommended": choice}
    write_summary(args.out, data, markdown(results, check, choice))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
