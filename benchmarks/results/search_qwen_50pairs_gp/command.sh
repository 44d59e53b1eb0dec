#!/usr/bin/env bash
# The Qwen2.5-Coder-0.5B-Instruct search at 50 pairs (3.4k tokens) with the GP sampler (issue 17), run in the
# background on 2 CPU cores and resumed every session: run it again and only the missing trials run (study.db
# in this folder). Same task, records, space and baselines as ../search_qwen_50pairs (the NSGA-II study), whose
# 9 trials that fit this study's sampler ranges were copied in first (benchmarks/copy_study.py; copy_check.json
# re-scores the copied base trial's first stage with the current code).
# --timeout bounds this session's search phase; the held-out step follows it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RA=${RA:-.venv/bin/rope-adapter}
exec "$RA" search --model qwen2.5-coder-0.5b-instruct --pairs 50 \
  --search-records 40 --holdout-records 40 --data-seed 0 \
  --s-min 0.8 --s-max 1.25 --degree 2 --sampler gp \
  --uniform 0.8 0.9 0.95 1.05 1.1 1.25 \
  --trials 400 --timeout "${TIMEOUT:-7200}" --threads 2 \
  --out benchmarks/results/search_qwen_50pairs_gp --no-progress "$@"
