#!/usr/bin/env bash
# Mutation runs on a machine with many CPU cores (a GPU host's cores; no GPU is used), from the
# repository root or from another checkout of the project given as TREE:
#   OUT=<dir> [JOBS=N] bash scripts/device_mutation.sh NAME PLAN KINDS BUDGET_S [TREE]
# runs every site of PLAN (a `tools/mutation.py --plan-out` file) with mutation_parallel.py over
# JOBS processes (default: every core), KINDS classic or fresh, each process starting no mutant
# after BUDGET_S seconds; the rows land in $OUT/NAME.jsonl even when the call's time limit stops
# the parallel runner before it joins them. Several calls in one command run one after another.
set -uo pipefail
name=$1 plan=$(realpath "$2") kinds=$3 budget=$4 tree=${5:-.}
jobs=${JOBS:-$(nproc)}
cd "$tree" || exit 2  # no install needed: each mutant imports the package from its scratch copy
work=$(mktemp -d /tmp/mutation_run_XXXX)
start=$SECONDS
TMPDIR=$work MUTATION_KINDS=$kinds timeout $((budget + 120)) python3 tools/mutation_parallel.py "$plan" \
    --jobs "$jobs" --count-killers --budget-s "$budget" --out "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
rc=$?
[ -s "$OUT/$name.jsonl" ] || cat "$work"/mutation_parallel_*/rows_*.jsonl > "$OUT/$name.jsonl" 2>/dev/null
echo "$name: rc=$rc $(wc -l < "$OUT/$name.jsonl") rows, $(grep -c '"survived"' "$OUT/$name.jsonl") survived," \
     "$((SECONDS - start)) s, $jobs jobs, kinds $kinds, tree $tree"
