#!/usr/bin/env bash
# benchmarks/results/dtype_agreement_qwen_50pairs.{json,md}: the float32 Qwen GP study's trials 0 (base), 12 (best
# searched curve), 3 (uniform 1.05) and 11 re-scored in bfloat16 on the first racing stage. The study file is
# copied first (Optuna may write to a file it opens).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp benchmarks/results/search_qwen_50pairs_gp/study.db "$tmp/study.db"
"$PY" benchmarks/dtype_agreement.py --storage "sqlite:///$tmp/study.db" --trials 0 12 3 11 \
  --out benchmarks/results/dtype_agreement_qwen_50pairs -- \
  --model qwen2.5-coder-0.5b-instruct --pairs 50 --search-records 40 --holdout-records 40 --data-seed 0 \
  --s-min 0.8 --s-max 1.25 --degree 2 --sampler gp --uniform 0.8 0.9 0.95 1.05 1.1 1.25 --threads 1 \
  --no-progress --dtype bfloat16
