#!/usr/bin/env bash
# Issue 17 item 2: which search score ranks the SmolLM2 10-pair study's trials like their held-out accuracy?
# In bfloat16 (several times faster on a CPU with AMX; ../dtype_agreement_qwen_50pairs.md). 16 trials spread over
# the study's range, each re-scored on its 40 search and 40 held-out records. Resumable:
# trials.jsonl keeps every trial scored; run again and only the missing ones run ("--report-only" to summarise).
# The study file is copied first (Optuna may write to a file it opens).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp benchmarks/results/search_smollm2_10pairs/study.db "$tmp/study.db"
"$PY" benchmarks/score_ranking.py --storage "sqlite:///$tmp/study.db" --trials 16 \
  --out benchmarks/results/score_ranking_smollm2_10pairs_bf16 "$@" -- \
  --model smollm2-135m-instruct --pairs 10 --search-records 40 --holdout-records 40 --data-seed 0 \
  --s-min 0.5 --s-max 2.0 --degree 3 --threads 1 --no-progress --dtype bfloat16
