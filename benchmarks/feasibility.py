"""Samplers on a synthetic score: how many proposals the factor bounds leave feasible and how close the best curve
gets to a target, for ``--compare endpoint`` (NSGA-II with end control ys kept within [s_min, s_max], the default,
against widened end ys, ``--endpoint-margin``) or ``--compare samplers`` (NSGA-II, GP and TPE, as the search builds
them, with bounded end ys), on the same seeds.

No model: the search's own space (``BezierSpace``: parameter bounds, decoding, constraint values), the sampler
the search makes (``search.samplers.build_sampler``), constraints set with ``Trial.set_constraint`` as the search
sets them, ``-inf`` values for an infeasible trial as the search returns), and a synthetic two-objective score in
place of the model: ``-mean`` and ``-max`` squared distance of the trial's per-layer factors to a target curve that
lies inside the bounds (a bump that touches 1.2 at mid-depth). The study settings default to the Qwen study's
(24 layers, degree 2, [0.8, 1.25], margin 0.25, population 8).

    .venv/bin/python benchmarks/feasibility.py --trials 80 --out benchmarks/results/feasibility
    .venv/bin/python benchmarks/feasibility.py --compare samplers --trials 60 --out benchmarks/results/feasibility
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from rope_adapter import files
from rope_adapter.search.bezier import BezierSpace, layer_depths
from rope_adapter.search.samplers import SAMPLERS, build_sampler
from rope_adapter.search.storage import baseline_params

CHECKPOINTS = (8, 16, 40, 80)  # trials after which the best error so far is reported (a short search's budget)


def target(num_layers: int, s_min: float, s_max: float) -> np.ndarray:
    d = layer_depths(num_layers)
    mid = (s_min + s_max) / 2
    return mid + (0.9 * s_max - mid) * np.sin(math.pi * d) ** 2 - 0.1 * (s_max - s_min) * d


def run(
    space: BezierSpace,
    num_layers: int,
    trials: int,
    population: int,
    seed: int,
    sampler: str = "nsga2",
    baselines: tuple[float, ...] = (),
) -> dict[str, Any]:
    goal = target(num_layers, space.s_min, space.s_max)
    feasible: list[bool] = []
    best = -math.inf
    best_so_far: list[float] = []

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        nonlocal best
        params = {name: trial.suggest_float(name, lo, hi) for name, (lo, hi) in space.param_bounds().items()}
        cp = space.decode(params)
        values = space.constraint_values(cp, num_layers)
        for i, v in enumerate(values):
            trial.set_constraint(f"c{i}", float(v))
        ok = all(v <= 0 for v in values)
        feasible.append(ok)
        if not ok:
            best_so_far.append(best)
            return -math.inf, -math.inf
        err = (space.factors(cp, num_layers) - goal) ** 2
        best = max(best, -float(err.mean()))
        best_so_far.append(best)
        return -float(err.mean()), -float(err.max())

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        directions=["maximize", "maximize"], sampler=build_sampler(sampler, seed=seed, population=population)
    )
    for value in baselines:  # enqueued first, as the search enqueues the unscaled model and uniform factors
        study.enqueue_trial(baseline_params(space, value))
    study.optimize(objective, n_trials=trials)
    generations = [feasible[i : i + population] for i in range(0, len(feasible), population)]
    return {
        "seed": seed,
        "feasible": int(sum(feasible)),
        "trials": len(feasible),
        "feasible_by_generation": [int(sum(g)) for g in generations],
        "best_mean_squared_error": -best if math.isfinite(best) else None,
        "best_after": {n: -best_so_far[n - 1] for n in CHECKPOINTS if n <= len(best_so_far)},
    }


def best_counts(arms: dict[str, Any], checkpoints: list[int], seeds: int) -> list[str]:
    """For each checkpoint, on how many seeds each arm had the strictly smallest best error (ties counted apart)."""
    lines = []
    for n in checkpoints:
        errors = {name: [r["best_after"][n] for r in arm["runs"]] for name, arm in arms.items()}
        wins = {name: 0 for name in arms} | {"tie": 0}
        for i in range(seeds):
            values = {k: errors[k][i] for k in errors}
            leaders = [k for k, v in values.items() if v == min(values.values())]
            wins[leaders[0] if len(leaders) == 1 else "tie"] += 1
        counts = ", ".join(f"{k} {v}" for k, v in wins.items())
        lines.append(f"- after {n} trials, seeds on which each sampler found the best curve: {counts}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--degree", type=int, default=2)
    parser.add_argument("--s-min", type=float, default=0.8)
    parser.add_argument("--s-max", type=float, default=1.25)
    parser.add_argument("--margin", type=float, default=0.25)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--trials", type=int, default=80)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--compare", choices=["endpoint", "samplers"], default="endpoint")
    parser.add_argument(
        "--baselines",
        type=float,
        nargs="*",
        default=[],
        help="constant curves enqueued first, as a search does (the Qwen study: 1 0.8 0.9 0.95 1.05 1.1 1.25)",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/feasibility"))
    args = parser.parse_args()
    arms = {}
    if args.compare == "endpoint":
        choices = [("bounded end ys (default)", False, "nsga2"), ("widened end ys (--endpoint-margin)", True, "nsga2")]
        title = "# Feasible NSGA-II proposals: bounded against widened end control ys"
    else:
        choices = [(name, False, name) for name in SAMPLERS]
        title = "# Samplers on the synthetic score: feasible proposals and best error"
    for name, wide, sampler in choices:
        space = BezierSpace(
            degree=args.degree, s_min=args.s_min, s_max=args.s_max, margin=args.margin, endpoint_margin=wide
        )
        runs = [
            run(space, args.layers, args.trials, args.population, seed, sampler, tuple(args.baselines))
            for seed in args.seeds
        ]
        arms[name] = {"endpoint_margin": wide, "sampler": sampler, "runs": runs}
    first, second = list(arms.values())[:2]
    ratio = sum(r["feasible"] for r in first["runs"]) / max(1, sum(r["feasible"] for r in second["runs"]))
    data = {"settings": vars(args) | {"out": str(args.out)}, "arms": arms, "feasible_ratio": ratio}
    lines = [
        title,
        "",
        f"Synthetic score (no model), {args.layers} layers, degree {args.degree}, factors in "
        f"[{args.s_min:g}, {args.s_max:g}], margin {args.margin:g}, population {args.population}, "
        f"{args.trials} trials per seed (the first {len(args.baselines)} constant baselines), seeds {' '.join(map(str, args.seeds))}. Command: "
        "`benchmarks/feasibility.py` (its docstring says what is synthetic).",
        "",
        f"| {'sampler range' if args.compare == 'endpoint' else 'sampler'} | feasible trials per seed | feasible in the first 2 generations (mean) | "
        + " | ".join(f"median best error after {n}" for n in CHECKPOINTS if n <= args.trials)
        + " |",
        "|---|---|---|" + "---|" * len([n for n in CHECKPOINTS if n <= args.trials]),
    ]
    for name, arm in arms.items():
        feas = [r["feasible"] for r in arm["runs"]]
        early = [sum(r["feasible_by_generation"][:2]) for r in arm["runs"]]
        after = [f"{np.median([r['best_after'][n] for r in arm['runs']]):.2e}" for n in CHECKPOINTS if n <= args.trials]
        lines.append(
            f"| {name} | {' / '.join(map(str, feas))} of {args.trials} | {np.mean(early):.1f} of "
            f"{min(2 * args.population, args.trials)} | " + " | ".join(after) + " |"
        )
    if args.compare == "endpoint":
        lines += ["", f"Feasible trials, bounded over widened: **{ratio:.2f}x** (same seeds, same trial count)."]
    else:
        lines += best_counts(arms, [n for n in CHECKPOINTS if n <= args.trials], len(args.seeds))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "feasibility" if args.compare == "endpoint" else "samplers"
    files.write_json((args.out / f"{stem}.json"), data, indent=1)
    files.write_text((args.out / f"{stem}.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
