#!/usr/bin/env bash
# The held-out verdict of the Qwen GP study in bfloat16 (benchmarks/results/search_qwen_50pairs_gp_bf16/, issue 17
# item 4), once it holds >= 60 scored searched curves:
#   1. the study's outputs without new trials: the chosen adapter, search_report.json and the search's own held-out
#      split (40 records x 5 positions), by resuming the same command with --trials 1 (the study holds more);
#   2. benchmarks/heldout_eval.sh on records the search never saw: 60 fresh records x 5 positions (seed 7),
#      greedy decoding on 20 others (seed 8), short-text perplexity, and the Lost in the Middle 75-pair file's first
#      30 records (LITM, optional: the MIT data is not part of a clone);
#   3. the paired comparisons by record (found - base, found - best uniform, best uniform - base) with t and
#      bootstrap intervals (rope-adapter compare), on the fresh records (seed 7; the greedy seed 8; both
#      pooled) and on the LitM records;
#   4. a float32 check: the study and the fresh, greedy and perplexity steps run in bfloat16 (about 4x faster on a
#      CPU with AMX; benchmarks/results/dtype_agreement_qwen_50pairs/ found 158 of 160 verdicts equal). The float32
#      study (benchmarks/results/search_qwen_50pairs/heldout/fresh-seed7/) scored base, uniform 1.05 and 1.1 on
#      the first 20 of the same fresh records in float32; the found adapter is scored on them in float32 too, so
#      that the verdicts of both dtypes are compared (benchmarks/eval_agreement.py) and the found curve is paired,
#      in float32, with uniform 1.05 as well (the float32 study's best uniform factor, tied with 1.1 on this
#      study's search set: 0.830 against 0.835).
#   5. found and uniform 1.05 in float32 on the 20 greedy records of seed 8, pooled with step 4: found against
#      1.05 on 40 fresh records in one dtype (base and 1.1 were scored on seed 8 in bfloat16 only: about 20 minutes
#      a variant in float32 on these 2 cores).
# The LitM step runs in LITM_DTYPE (float32 here): it ran in session 26 on a machine without AMX, where bfloat16 is
# about 4x slower than float32 (a 1024x896x4864 matmul on 2 threads: 0.153 s against 0.033 s,
# benchmarks/results/dtype_speed_no_amx/dtype_speed_no_amx.json). Every variant of one step shares one dtype, so
# each comparison is within a dtype.
# Every step is skipped when its outputs exist, so the script resumes where it stopped.
# RA: the rope-adapter command (default .venv/bin/rope-adapter); REDO_OUTPUTS=1: redo step 1 even if its outputs
# exist; REDO=1: redo the other steps.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
RA=${RA:-.venv/bin/rope-adapter}
py="$(dirname "$RA")/python"
paired() { # paired OUT.md RESULTS... FLAGS: `rope-adapter compare`'s table in OUT.md and its JSON in OUT.json
    local md=$1
    shift
    mkdir -p "$(dirname "$md")"
    "$RA" compare "$@" >"$md"
    "$RA" compare "$@" --json >"${md%.md}.json"
}
out=benchmarks/results/search_qwen_50pairs_gp_bf16
# Step 1 is skipped when its outputs exist (committed in session 24 at 80 trials); REDO_OUTPUTS=1 redoes it. It is
# the study's own command (benchmarks/results/search_qwen_50pairs_gp_bf16/README.md) with --trials 1 --timeout 1.
if [ -n "${REDO_OUTPUTS:-}" ] || [ ! -f "$out/search_report.json" ] || [ ! -d "$out/adapter" ]; then
    "$RA" search --model qwen2.5-coder-0.5b-instruct --pairs 50 \
        --search-records 40 --holdout-records 40 --data-seed 0 \
        --s-min 0.8 --s-max 1.25 --degree 2 --sampler gp --dtype bfloat16 \
        --uniform 0.8 0.9 0.95 1.05 1.1 1.25 \
        --trials 1 --timeout 1 --threads 2 --out "$out" --no-progress
fi
RA=$RA DTYPE=bfloat16 LITM_DTYPE=${LITM_DTYPE:-float32} GREEDY_RECORDS=20 LITM_RECORDS=30 \
    bash benchmarks/heldout_eval.sh "$out" qwen2.5-coder-0.5b-instruct 50 60 "${LITM:-}"
uniform=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['baselines']['best_uniform']['uniform'])" \
    "$out/search_report.json")
paired "$out/heldout/fresh-seed7/paired.md" "$out/heldout/fresh-seed7/results.json" \
    --compare found base --compare found "uniform:$uniform" --compare "uniform:$uniform" base
paired "$out/heldout/greedy-seed8/paired.md" "$out/heldout/greedy-seed8/results.json" --metrics accuracy,tf_accuracy \
    --compare found base --compare found "uniform:$uniform" --compare "uniform:$uniform" base
# both fresh seeds pooled (80 records), teacher-forced accuracy: an addition to the 60-record verdict above
paired "$out/heldout/fresh-pooled-seed7-8/paired.md" "$out/heldout/fresh-seed7/results.json" "$out/heldout/greedy-seed8/results.json" \
    --metrics tf_accuracy --compare found base --compare found "uniform:$uniform" --compare "uniform:$uniform" base
litm_out="$out/heldout/litm-kv-retrieval-75_keys"
if [ -f "$litm_out/results.json" ]; then
    paired "$litm_out/paired.md" "$litm_out/results.json" \
        --compare found base --compare found "uniform:$uniform" --compare "uniform:$uniform" base
fi
check="$out/heldout/fresh-seed7-float32-found"
if [ -n "${REDO:-}" ] || [ ! -f "$check/results.json" ]; then
    "$RA" eval --model qwen2.5-coder-0.5b-instruct --pairs 50 --num-samples 20 --seed 7 \
        --variants "found=adapter:$out/adapter" --scores tf_accuracy,logprob --dtype float32 --out "$check" --no-progress
fi
f32=benchmarks/results/search_qwen_50pairs/heldout/fresh-seed7/results.json
"$py" benchmarks/eval_agreement.py "$out/heldout/fresh-seed7/results.json" "$check/results.json" \
    --out "$out/heldout/float32-agreement-found"
"$py" benchmarks/eval_agreement.py "$out/heldout/fresh-seed7/results.json" "$f32" \
    --out "$out/heldout/float32-agreement-baselines"
paired "$out/heldout/fresh-seed7-float32-pooled/paired.md" "$f32" "$check/results.json" \
    --compare found base --compare found "uniform:$uniform" --compare found uniform:1.05 --compare uniform:1.05 base
# 5. (session 26) found and uniform 1.05 in float32 on the 20 fresh records of seed 8, pooled with step 4's 20
#    records of seed 7: found against 1.05, 40 records, one dtype.
check8="$out/heldout/fresh-seed8-float32"
if [ -n "${REDO:-}" ] || [ ! -f "$check8/results.json" ]; then
    "$RA" eval --model qwen2.5-coder-0.5b-instruct --pairs 50 --num-samples 20 --seed 8 \
        --variants "uniform:1.05,found=adapter:$out/adapter" --scores tf_accuracy,logprob \
        --dtype float32 --out "$check8" --no-progress
fi
paired "$out/heldout/fresh-pooled-seed7-8-float32/paired.md" "$f32" "$check/results.json" "$check8/results.json" \
    --compare found uniform:1.05
"$py" benchmarks/eval_agreement.py "$out/heldout/greedy-seed8/results.json" "$check8/results.json" \
    --out "$out/heldout/float32-agreement-found-seed8"
