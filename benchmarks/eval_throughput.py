"""Evaluation throughput: our scorer vs a plain `model.generate` / per-sample forward loop, in one run.

On SmolLM2-135M-Instruct (the embedded default) and KV-retrieval samples (one record set, several gold
positions, so the prompts share their JSON prefix):

- greedy accuracy: `rope_adapter.scoring.generation.greedy_accuracy` (shared-prefix KV cache, batched) vs a loop
  of `model.generate(prompt, do_sample=False)` over the same prompts; the answers must be identical;
- gold log-prob: `token_logprobs` with the shared prefix vs one full forward pass per sample (the plain
  computation, `shared_prefix=False`); the scores must agree.

Reports samples/s for each and the ratios, and writes JSON and a Markdown summary into its result folder
(default benchmarks/results/eval_throughput/eval_throughput.{json,md}).

    .venv/bin/python benchmarks/eval_throughput.py [--records 4] [--pairs 20] [--positions 5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from machine_info import environment, timed
from result_files import RESULTS, write_summary

from rope_adapter.embedded.loading import load_default_model
from rope_adapter.scoring.generation import greedy_accuracy
from rope_adapter.scoring.shared_prefix import prepare, token_logprobs
from rope_adapter.scoring.tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4, help="record sets (each gives one sample per position)")
    parser.add_argument("--pairs", type=int, default=20, help="key-value pairs per record")
    parser.add_argument("--positions", type=int, default=5, help="gold positions per record")
    parser.add_argument("--batch-size", type=int, default=4, help="record sets per forward pass (our scorer)")
    parser.add_argument("--out", type=Path, default=RESULTS / "eval_throughput", help="result folder")
    args = parser.parse_args()

    model, tokenizer = load_default_model()
    task = get_task("kv-retrieval")(num_records=args.records, num_pairs=args.pairs, num_positions=args.positions)
    samples = task.samples()
    prepared = prepare(samples, tokenizer)
    n = len(samples)
    max_new = prepared.max_new_tokens

    with torch.inference_mode():
        ours, t_ours = timed(lambda: greedy_accuracy(model, prepared, task.is_correct, batch_size=args.batch_size))

        def plain_generate() -> list[str]:
            answers = []
            for sample in samples:
                ids = tokenizer(sample.prompt, return_tensors="pt")
                out = model.generate(
                    **ids, max_new_tokens=max_new, do_sample=False, pad_token_id=tokenizer.eos_token_id
                )
                answers.append(tokenizer.decode(out[0, ids.input_ids.shape[1] :], skip_special_tokens=True))
            return answers

        plain, t_plain = timed(plain_generate)
        shared, t_lp_ours = timed(lambda: token_logprobs(model, prepared, batch_size=args.batch_size))
        separate, t_lp_plain = timed(lambda: token_logprobs(model, prepared, shared_prefix=False, batch_size=1))

    same_answers = sum(a.strip() == b.strip() for a, b in zip(ours.predictions, plain, strict=True))
    lp_diff = float(np.max(np.abs(shared.mean() - separate.mean())))
    results = {
        "model": "SmolLM2-135M-Instruct (embedded)",
        "task": {"name": "kv-retrieval", "records": args.records, "pairs": args.pairs, "positions": args.positions},
        "samples": n,
        "greedy": {
            "ours_s": t_ours,
            "plain_generate_loop_s": t_plain,
            "ours_samples_per_s": n / t_ours,
            "plain_samples_per_s": n / t_plain,
            "speedup": t_plain / t_ours,
            "identical_answers": same_answers,
            "max_new_tokens": max_new,
        },
        "logprob": {
            "shared_prefix_s": t_lp_ours,
            "per_sample_forward_s": t_lp_plain,
            "shared_samples_per_s": n / t_lp_ours,
            "plain_samples_per_s": n / t_lp_plain,
            "speedup": t_lp_plain / t_lp_ours,
            "max_abs_diff_of_sample_means": lp_diff,
        },
        "environment": environment(),
    }
    g, lp = results["greedy"], results["logprob"]
    md = [
        "# Evaluation throughput",
        "",
        f"SmolLM2-135M-Instruct, kv-retrieval, {args.records} records x {args.positions} positions = {n} samples, "
        f"{args.pairs} pairs, {torch.get_num_threads()} threads. Command: `.venv/bin/python benchmarks/eval_throughput.py "
        f"--records {args.records} --pairs {args.pairs} --positions {args.positions}`",
        "",
        "| scoring | ours (samples/s) | plain loop (samples/s) | speed-up | agreement |",
        "|---|---|---|---|---|",
        f"| greedy accuracy | {g['ours_samples_per_s']:.3f} | {g['plain_samples_per_s']:.3f} (model.generate per "
        f"prompt) | {g['speedup']:.2f}x | {same_answers}/{n} identical answers |",
        f"| gold log-prob | {lp['shared_samples_per_s']:.3f} | {lp['plain_samples_per_s']:.3f} (one forward per "
        f"sample) | {lp['speedup']:.2f}x | max diff {lp_diff:.2e} |",
        "",
    ]
    write_summary(args.out, results, "\n".join(md), indent=2, newline=False)


if __name__ == "__main__":
    main()
