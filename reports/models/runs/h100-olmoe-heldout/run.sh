#!/usr/bin/env bash
# A third MoE shape, held out from the MoE pricing (the dispatch kernel list and the grouped GEMM's per-SM cap were
# taken from mixtral-8x7b and checked on deepseek-v3): OLMoE-1B-7B's shape (OLMOE of device_models_lib.sh), under
# CUDA graphs (about 2 min).
#   reports/models/runs/h100-olmoe-heldout/run.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/olmoe 150 "$@"
run() { bench_case "$DIR/rows.jsonl" 120 "${OLMOE[@]}" --mode graph "$@"; }
run --phase decode --batch 1,16,64 --seq 2048
run --phase prefill --batch 1,4 --seq 2048
run --phase train --batch 2 --seq 2048
models_done
