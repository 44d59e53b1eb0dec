"""Do two `rope-adapter eval` runs of the same samples (another dtype, another machine) give the same verdicts?

Every sample is keyed by (variant, record id, gold position), so runs with other record counts of the same seed
are compared on the samples both have. For each variant both runs scored: how many samples match, on how many
the teacher-forced verdict (``tf_accuracy``, or ``--metric``) is the same, the largest change of the whole
answer's log-prob, and each run's mean over the shared samples. Runs of another model, task or prompt layout are
refused. Writes ``<out>.json`` and ``<out>.md``.

    .venv/bin/python benchmarks/eval_agreement.py BF16/results.json FLOAT32/results.json --out agreement
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from rope_adapter import files
from rope_adapter.evaluate.evaluation import load_results

Key = tuple[str, str, int]


def _samples(data: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    return {(s["variant"], str(s["record_id"]), int(s["position"])): s for s in data["samples"]}


def _layout(data: dict[str, Any]) -> dict[str, Any]:
    """What must agree between the runs: the model and the prompt layout, not the dtype, seed or record count."""
    settings = data.get("settings", {})
    task = {k: v for k, v in settings.get("task_settings", {}).items() if k not in ("num_records",)}
    return {
        "task": data.get("task"),
        "model": settings.get("model"),
        "chat_template": settings.get("chat_template"),
        "positions": data.get("positions"),
        "task_settings": task,
    }


def agreement(a: dict[str, Any], b: dict[str, Any], metric: str = "tf_accuracy") -> list[dict[str, Any]]:
    """One row per variant that both runs scored, on the samples both have."""
    la, lb = _layout(a), _layout(b)
    if la != lb:
        diff = sorted(k for k in la if la[k] != lb[k])
        raise SystemExit(f"the runs score different samples: they differ in {', '.join(diff)}")
    sa, sb = _samples(a), _samples(b)
    rows = []
    for variant in sorted({k[0] for k in sa} & {k[0] for k in sb}):
        keys = sorted(k for k in sa if k[0] == variant and k in sb)
        if not keys or metric not in sa[keys[0]]:
            continue
        va = np.array([sa[k][metric] for k in keys], dtype=float)
        vb = np.array([sb[k][metric] for k in keys], dtype=float)
        row: dict[str, Any] = {
            "variant": variant,
            "samples": len(keys),
            "records": len({k[1] for k in keys}),
            "same_verdict": int(np.sum(va == vb)),
            "mean_a": float(va.mean()),
            "mean_b": float(vb.mean()),
        }
        if "logprob" in sa[keys[0]] and "logprob" in sb[keys[0]]:
            change = [abs(sa[k]["logprob"] - sb[k]["logprob"]) for k in keys]
            row["max_logprob_change"] = float(max(change))
        rows.append(row)
    if not rows:
        raise SystemExit(f"no variant with {metric!r} was scored on the same samples by both runs")
    return rows


def _label(data: dict[str, Any], path: Path) -> str:
    settings = data.get("settings", {})
    return f"`{path}` ({settings.get('dtype')}, {settings.get('environment', {}).get('date', '?')[:10]})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="results.json of the first run (run A)")
    parser.add_argument("b", type=Path, help="results.json of the second run (run B)")
    parser.add_argument("--metric", default="tf_accuracy", help="the 0/1 verdict to compare (default tf_accuracy)")
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix (.json and .md)")
    args = parser.parse_args(argv)
    a, b = load_results(args.a), load_results(args.b)
    rows = agreement(a, b, args.metric)
    result = {"a": str(args.a), "b": str(args.b), "metric": args.metric, "variants": rows}
    lines = [
        f"# Do two eval runs agree? ({args.metric})",
        "",
        f"Run A: {_label(a, args.a)}. Run B: {_label(b, args.b)}. Samples matched by (variant, record, gold "
        "position); only the samples both runs scored.",
        "",
        "| variant | records | samples | same verdict | mean A | mean B | largest log-prob change |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        change = f"{r['max_logprob_change']:.4f}" if "max_logprob_change" in r else "–"
        lines.append(
            f"| `{r['variant']}` | {r['records']} | {r['samples']} | {r['same_verdict']} of {r['samples']} | "
            f"{r['mean_a']:.3f} | {r['mean_b']:.3f} | {change} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(args.out.with_suffix(".json"), result, indent=2)
    files.write_text(args.out.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
