#!/usr/bin/env bash
# MoE models under CUDA graphs (grouped-GEMM experts): the GPU test of the grouped path, then mixtral-8x7b and
# deepseek-v3 with 4 layers (2 for mixtral's training step), graph and eager rows (about 5 min: no case starts
# after BUDGET_S).
#   reports/models/runs/h200-moe-graphs/run.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md, the test -> DIR/gpu_tests.log)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/moe 330 "$@"
run() { bench_case "$DIR/rows.jsonl" 150 "$@"; }
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_bench_model_builder.py -k "moe" >"$DIR/gpu_tests.log" 2>&1 \
  || echo "exit $?" >>"$DIR/gpu_tests.log"
run mixtral-8x7b --layers 4 --phase decode --batch 1,16,64 --seq 2048
run mixtral-8x7b --layers 4 --phase prefill --batch 1,4 --seq 2048
run deepseek-v3 --layers 4 --phase decode --batch 1,16 --seq 2048
run deepseek-v3 --layers 4 --phase prefill --batch 1 --seq 2048
run mixtral-8x7b --layers 2 --phase train --batch 1 --seq 2048
models_done
