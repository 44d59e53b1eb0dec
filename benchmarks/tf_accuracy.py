"""Teacher-forced accuracy against the greedy loop: agreement and speed, on the same KV-retrieval samples.

Greedy decoding produces the gold answer exactly when, at every answer position, the argmax given the gold prefix
is the gold token. `token_logprobs` computes that verdict in the same forward pass as the log-probability
(`TokenLogprobs.exact()`), so accuracy needs no decode loop. Which answer form the model writes matters: the
benchmark's rule accepts any answer that contains the value, and a model may open with a quote (`' "' + value`)
or not (`' ' + value`). This script scores both forms and compares each verdict, and their union, with real
greedy decoding judged by the benchmark's rule (`rope_adapter.scoring.generation.greedy_accuracy`).

Writes JSON and Markdown into its result folder (``--out``; default
benchmarks/results/tf_accuracy_<model>_<pairs>pairs/, the files named after the folder).

    .venv/bin/python benchmarks/tf_accuracy.py --model smollm2-135m-instruct --pairs 10 --records 20
    .venv/bin/python benchmarks/tf_accuracy.py --model qwen2.5-coder-0.5b-instruct --pairs 50 --records 6
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from machine_info import environment, timed
from result_files import RESULTS, write_summary
from transformers import AutoModelForCausalLM, AutoTokenizer

from rope_adapter.embedded.loading import resolve_model_path
from rope_adapter.scoring.generation import greedy_accuracy
from rope_adapter.scoring.shared_prefix import prepare, token_logprobs
from rope_adapter.scoring.tasks import get_task

FORMS = {"space": " ", "quote": ' "'}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--records", type=int, default=20, help="records (each gives one sample per position)")
    parser.add_argument("--pairs", type=int, default=10, help="key-value pairs per record")
    parser.add_argument("--positions", type=int, default=5, help="gold positions per record")
    parser.add_argument("--seed", type=int, default=11, help="seed of the generated records")
    parser.add_argument("--batch-size", type=int, default=1, help="records per forward pass")
    parser.add_argument("--out", type=Path, default=None, help="result folder")
    args = parser.parse_args()

    path = resolve_model_path(args.model)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    results: dict = {
        "model": args.model,
        "task": {"name": "kv-retrieval", "records": args.records, "pairs": args.pairs, "positions": args.positions},
        "seed": args.seed,
        "forms": {},
    }
    task = get_task("kv-retrieval")(
        num_records=args.records, num_pairs=args.pairs, num_positions=args.positions, seed=args.seed
    )
    samples = task.samples()
    with torch.inference_mode():
        greedy, t_greedy = timed(
            lambda: greedy_accuracy(model, prepare(samples, tokenizer), task.is_correct, batch_size=args.batch_size)
        )
        verdicts = {}
        for name, prefix in FORMS.items():
            form_task = get_task("kv-retrieval")(
                num_records=args.records,
                num_pairs=args.pairs,
                num_positions=args.positions,
                seed=args.seed,
                target_prefix=prefix,
            )
            prepared = prepare(form_task.samples(), tokenizer)
            logprobs, seconds = timed(lambda p=prepared: token_logprobs(model, p, batch_size=args.batch_size))
            verdicts[name] = logprobs.exact()
            results["forms"][name] = {
                "target_prefix": prefix,
                "seconds": seconds,
                "accuracy": float(verdicts[name].mean()),
                "agreement_with_greedy": float((verdicts[name] == greedy.correct).mean()),
                "whole_answer_logprob": float(logprobs.mean().mean()),
                "speedup_vs_greedy": t_greedy / seconds,
            }
        # the default task: both forms in one pass, the form greedy writes chosen per sample (what a search scores)
        prepared = prepare(task.samples(), tokenizer)
        default, t_default = timed(lambda: token_logprobs(model, prepared, batch_size=args.batch_size))
    either = verdicts["space"] | verdicts["quote"]
    both = default.exact()
    results["default_both_forms"] = {
        "seconds": t_default,
        "accuracy": float(both.mean()),
        "agreement_with_greedy": float((both == greedy.correct).mean()),
        "speedup_vs_greedy": t_greedy / t_default,
    }
    n = len(samples)
    opens_with_quote = sum(p.lstrip().startswith('"') for p in greedy.predictions)
    results.update(
        samples=n,
        greedy={
            "seconds": t_greedy,
            "accuracy": greedy.accuracy(),
            "by_position": greedy.by_position(),
            "answers_opening_with_a_quote": opens_with_quote,
        },
        either_form={
            "accuracy": float(either.mean()),
            "agreement_with_greedy": float((either == greedy.correct).mean()),
        },
        disagreements=[
            {"record": s.record_id, "position": s.position, "greedy": p, "greedy_correct": bool(c)}
            for s, p, c, e in zip(samples, greedy.predictions, greedy.correct, either, strict=True)
            if bool(c) != bool(e)
        ],
        environment=environment(),
    )
    slug = Path(str(args.model)).name.lower()
    out = args.out or RESULTS / f"tf_accuracy_{slug}_{args.pairs}pairs"
    md = [
        f"# Teacher-forced accuracy vs greedy decoding: {args.model}, {args.pairs} pairs",
        "",
        f"{args.records} records x {args.positions} gold positions = {n} samples (seed {args.seed}), "
        f"{torch.get_num_threads()} threads. Greedy accuracy (benchmark rule) {greedy.accuracy():.3f} in "
        f"{t_greedy:.1f} s; {opens_with_quote}/{n} greedy answers open with a quote.",
        "",
        "| answer form | teacher-forced accuracy | agreement with greedy | time (s) | speed-up vs greedy |",
        "|---|---|---|---|---|",
    ]
    for name, row in results["forms"].items():
        md.append(
            f"| `{row['target_prefix']!r}` + value ({name}) | {row['accuracy']:.3f} | "
            f"{row['agreement_with_greedy']:.3f} | {row['seconds']:.1f} | {row['speedup_vs_greedy']:.2f}x |"
        )
    md.append(
        f"| either form | {results['either_form']['accuracy']:.3f} | "
        f"{results['either_form']['agreement_with_greedy']:.3f} | | |"
    )
    row = results["default_both_forms"]
    md.append(
        f"| both forms in one pass (the default) | {row['accuracy']:.3f} | {row['agreement_with_greedy']:.3f} | "
        f"{row['seconds']:.1f} | {row['speedup_vs_greedy']:.2f}x |"
    )
    md += [
        "",
        f"Command: `.venv/bin/python benchmarks/tf_accuracy.py --model {args.model} --pairs {args.pairs} "
        f"--records {args.records} --positions {args.positions} --seed {args.seed}`",
        "",
    ]
    write_summary(out, results, "\n".join(md), indent=2)
    print(f"disagreements: {len(results['disagreements'])}; {np.round(greedy.correct.mean(), 3)}")


if __name__ == "__main__":
    main()
