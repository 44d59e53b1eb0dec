#!/usr/bin/env bash
# Held-out evidence for a finished search: the found adapter against the unscaled model and the best uniform
# factor on records the search never saw, in the benchmark's metric, with 95 % intervals.
#
#   benchmarks/heldout_eval.sh SEARCH_OUT MODEL PAIRS [RECORDS] [LITM_FILE]
#
# 1. fresh generated records (seed 7): teacher-forced accuracy (greedy's verdict) and whole-answer log-prob;
# 2. greedy decoding on 10 other fresh records (seed 8), to check the teacher-forced verdict against it;
# 3. short-text perplexity (the search's built-in perplexity text, one 256-token window);
# 4. optionally the Lost in the Middle file's own records (read as they are; first RECORDS/4 of them).
# Each step writes results.json / results.md / positions.png under SEARCH_OUT/heldout/. A step whose results.json
# is already there is skipped (the run resumes after an interruption; eval would replace its own outputs), unless
# REDO=1.
# Environment: DTYPE (float32; bfloat16 is about 4x faster on a CPU with AMX and about 4x slower on one without),
# LITM_DTYPE (DTYPE), GREEDY_RECORDS (10), LITM_RECORDS (RECORDS/4), RA (the rope-adapter command; default the
# clone's .venv).
set -euo pipefail
out=${1:?search output folder}
model=${2:?model name or folder}
pairs=${3:?key-value pairs per record}
records=${4:-40}
litm=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cli=${RA:-"$here/.venv/bin/rope-adapter"}
py="$(dirname "$cli")/python"
dtype=${DTYPE:-float32}
litm_dtype=${LITM_DTYPE:-$dtype}
greedy=${GREEDY_RECORDS:-10}
litm_records=${LITM_RECORDS:-$((records / 4))}
adapter="$out/adapter"
uniform=$("$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['baselines']['best_uniform']['uniform'])" \
    "$out/search_report.json")
variants="base,uniform:$uniform,found=adapter:$adapter"
mkdir -p "$out/heldout"
echo "best uniform factor on the search set: $uniform"

todo() { # todo DIR: true unless DIR already holds a finished eval (results.json) and REDO is unset
    if [ -z "${REDO:-}" ] && [ -f "$1/results.json" ]; then
        echo "skipping $1: results.json exists (REDO=1 redoes it)"
        return 1
    fi
}

if todo "$out/heldout/fresh-seed7"; then
    "$cli" eval --model "$model" --pairs "$pairs" --num-samples "$records" --seed 7 --variants "$variants" \
        --scores tf_accuracy,logprob --dtype "$dtype" --out "$out/heldout/fresh-seed7" --no-progress
fi
if todo "$out/heldout/greedy-seed8"; then
    "$cli" eval --model "$model" --pairs "$pairs" --num-samples "$greedy" --seed 8 --variants "$variants" \
        --scores accuracy,tf_accuracy --dtype "$dtype" --out "$out/heldout/greedy-seed8" --no-progress
fi
if todo "$out/heldout/perplexity"; then
    text="$out/heldout/perplexity_text.txt"
    # from / : in a clone's root, the rope_adapter folder would shadow a non-editable install (it lacks search/)
    (cd / && "$py" -c "from rope_adapter.search.data import DEFAULT_PERPLEXITY_TEXT as t; print(t)") > "$text"
    "$cli" eval --model "$model" --task perplexity --data "$text" --lengths 256 --num-windows 1 \
        --variants "$variants" --dtype "$dtype" --out "$out/heldout/perplexity" --no-progress
fi
if [ -n "$litm" ] && todo "$out/heldout/litm-$(basename "$litm" .jsonl.gz)"; then
    "$cli" eval --model "$model" --data "$litm" --num-samples "$litm_records" --variants "$variants" \
        --scores tf_accuracy,logprob --dtype "$litm_dtype" --out "$out/heldout/litm-$(basename "$litm" .jsonl.gz)" \
        --no-progress
fi
