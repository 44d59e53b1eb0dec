#!/usr/bin/env bash
# The Qwen2.5-Coder-0.5B-Instruct search at 50 pairs (3.4k tokens) with the GP sampler (issue 17), scored in
# bfloat16: on a CPU with AMX a forward pass is about 4x faster than in float32, and the verdicts agree
# (../dtype_agreement_qwen_50pairs.md: the float32 study's trials re-scored in bfloat16). Same task, records, space,
# baselines and sampler as ../search_qwen_50pairs_gp (the float32 study, stopped at 15 trials); a study's dtype is
# part of its fingerprint, so this is a new study, not a copy. Run in the background on 2 CPU cores and resumed
# every session: run it again and only the missing trials run (study.db in this folder). The held-out verdict
# (heldout.sh here) is scored in bfloat16, with a float32 check on 10 records. --timeout bounds this run's search phase.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RA=${RA:-.venv/bin/rope-adapter}
exec "$RA" search --model qwen2.5-coder-0.5b-instruct --pairs 50 \
  --search-records 40 --holdout-records 40 --data-seed 0 \
  --s-min 0.8 --s-max 1.25 --degree 2 --sampler gp --dtype bfloat16 \
  --uniform 0.8 0.9 0.95 1.05 1.1 1.25 \
  --trials 400 --timeout "${TIMEOUT:-7200}" --threads 2 \
  --out benchmarks/results/search_qwen_50pairs_gp_bf16 --no-progress "$@"
