#!/usr/bin/env bash
# Issue 17 item 2 on the model that answers: which search score ranks the Qwen 50-pair bfloat16 GP study's trials
# like their held-out accuracy? 12 trials spread over the study's range of search-set means, each re-scored on its
# 40 search and 40 held-out records (about 12 minutes a trial on 2 cores with AMX in bfloat16; about an hour in
# float32 on 2 cores without AMX, where bfloat16 is about 4x slower and the held-out eval scored 20 such records in
# 10-20 minutes a variant). Resumable: trials.jsonl keeps every trial scored
# (in bit-reversed order, so a partial run is spread over the range); run again and only the
# missing ones run ("--report-only" to summarise). DTYPE (bfloat16) is the dtype of the re-scoring: bfloat16 writes
# to this folder, any other dtype to score_ranking_qwen_50pairs_<DTYPE>/ beside it (one ranking never mixes dtypes,
# and score_ranking.py refuses a trials.jsonl of another). The study file is copied first (Optuna may write to a
# file it opens). PY: the Python of an environment with rope-adapter installed (default the clone's .venv).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
DTYPE=${DTYPE:-bfloat16}
out=benchmarks/results/score_ranking_qwen_50pairs_bf16
[ "$DTYPE" = bfloat16 ] || out=benchmarks/results/score_ranking_qwen_50pairs_$DTYPE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp benchmarks/results/search_qwen_50pairs_gp_bf16/study.db "$tmp/study.db"
"$PY" benchmarks/score_ranking.py --storage "sqlite:///$tmp/study.db" --trials 12 \
  --out "$out" "$@" -- \
  --model qwen2.5-coder-0.5b-instruct --pairs 50 --search-records 40 --holdout-records 40 --data-seed 0 \
  --s-min 0.8 --s-max 1.25 --degree 2 --sampler gp --threads 2 --no-progress --dtype "$DTYPE"
