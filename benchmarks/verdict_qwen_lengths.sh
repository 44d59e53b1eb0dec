#!/usr/bin/env bash
# The verdict of the two-length Qwen study (benchmarks/results/search_qwen_lengths/README.md, fixed before the study
# ran): base, the best uniform factor and the found curve, both as chosen on the confirmation records, on five sets
# that neither the search, the confirmation nor the study's held-out split used.
#
#   bash benchmarks/verdict_qwen_lengths.sh [LITM_DIR]
#
# Sets (10 evenly spaced gold positions, teacher-forced accuracy and gold log-prob): 40 generated records, seed 31,
#   at 50, 75 and 100 pairs; the Lost in the Middle kv-retrieval-75_keys and -140_keys files (LITM_DIR holds them;
#   MIT data, not part of a clone): 40 and 16 records drawn with seed 0 (16 are the first 16 of the 40-record draw;
#   the study README says why the 140-key set was cut, before any of its accuracies was computed).
# Then greedy decoding on the first 10 records of each generated set (its verdict against the teacher-forced one),
# short-text perplexity, and benchmarks/lengths_verdict.py: every comparison paired by record, per set, per length
# and pooled over every set.
#
# Each (set, variant) is one `rope-adapter eval` run (40 records up to 100 pairs: 20-70 minutes on 2 cores; 16 records
# of 140 keys: about 90 minutes) whose results.json is skipped when it exists, and an interrupted run resumes after
# its last 8 records kept, so the script resumes where it stopped; the runs of one set score the same records, and
# `rope-adapter compare` pairs them by record. Environment: RA (the rope-adapter command; default the clone's .venv),
# DTYPE (bfloat16, the study's), RECORDS (40, generated sets), LITM_RECORDS ("40 16", one count per LITM_KEYS entry),
# GREEDY_RECORDS (10), THREADS (2), ONLY (a space-separated list of set names to run, e.g. "gen-50 gen-75"; default
# all); for another study of the same design: STUDY (its folder), MODEL, GEN_PAIRS ("50 75 100"), LITM_KEYS
# ("75 140"), POSITIONS (10). Edit this file only while no run of it is going: bash reads a running script as it goes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
litm=${1:-}
RA=${RA:-"$here/.venv/bin/rope-adapter"}
py="$(dirname "$RA")/python"
dtype=${DTYPE:-bfloat16}
records=${RECORDS:-40}
greedy=${GREEDY_RECORDS:-10}
threads=${THREADS:-2}
model=${MODEL:-qwen2.5-coder-0.5b-instruct}
study=${STUDY:-benchmarks/results/search_qwen_lengths}
gen_pairs=${GEN_PAIRS:-50 75 100}
litm_keys=${LITM_KEYS:-75 140}
read -r -a litm_records <<<"${LITM_RECORDS:-40 16}"
positions=${POSITIONS:-10}
out=$study/verdict
report=$study/search_report.json
[ -f "$report" ] && [ -d "$study/adapter" ] || {
    echo "no search_report.json or adapter/ in $study: finish the study first (its README's command)" >&2
    exit 2
}
uniform=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['baselines']['best_uniform']['uniform'])" "$report")
echo "best uniform factor (chosen on the confirmation records): $uniform"
declare -A spec=([base]=base ["uniform"]="uniform:$uniform" [found]="found=adapter:$study/adapter")

wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

run() { # run DIR ARGS...: one eval run unless DIR/results.json exists
    local dir=$1
    shift
    if [ -f "$dir/results.json" ]; then
        echo "skipping $dir: results.json exists"
        return 0
    fi
    echo "$(date -u +%FT%TZ) $dir"
    "$RA" eval --model "$model" --dtype "$dtype" --threads "$threads" --out "$dir" --no-progress "$@"
}

for pairs in $gen_pairs; do
    name=gen-$pairs
    wanted "$name" || continue
    for v in base uniform found; do
        run "$out/$name/$v" --pairs "$pairs" --num-positions "$positions" --num-samples "$records" --seed 31 \
            --variants "${spec[$v]}" --scores tf_accuracy,logprob
    done
done
if [ -n "$litm" ]; then
    i=0
    for keys in $litm_keys; do
        name=litm-$keys
        n=${litm_records[$i]:-$records}
        i=$((i + 1))
        wanted "$name" || continue
        for v in base uniform found; do
            run "$out/$name/$v" --data "$litm/kv-retrieval-${keys}_keys.jsonl.gz" --num-positions "$positions" \
                --num-samples "$n" --seed 0 --variants "${spec[$v]}" --scores tf_accuracy,logprob
        done
    done
fi
for pairs in $gen_pairs; do
    wanted "greedy-$pairs" || continue
    run "$out/greedy-$pairs" --pairs "$pairs" --num-positions "$positions" --num-samples "$greedy" --seed 31 \
        --variants "base,${spec[uniform]},${spec[found]}" --scores accuracy,tf_accuracy
done
if wanted perplexity; then
    mkdir -p "$out"
    text="$out/perplexity_text.txt"
    # from / : in a clone's root, the rope_adapter folder would shadow a non-editable install (it lacks search/)
    [ -f "$text" ] || (cd / && "$py" -c "from rope_adapter.search.data import DEFAULT_PERPLEXITY_TEXT as t; print(t)") >"$text"
    run "$out/perplexity" --task perplexity --data "$text" --lengths 256 --num-windows 1 \
        --variants "base,${spec[uniform]},${spec[found]}"
fi
sets=()
for pairs in $gen_pairs; do sets+=("gen-$pairs"); done
if [ -n "$litm" ]; then
    for keys in $litm_keys; do sets+=("litm-$keys"); done
    "$py" benchmarks/lengths_verdict.py "$study" --sets "${sets[@]}"
else # a clone without the Lost in the Middle data: the generated sets only, written beside the full verdict
    "$py" benchmarks/lengths_verdict.py "$study" --sets "${sets[@]}" --out "$out/verdict-generated-only"
fi
