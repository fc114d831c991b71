#!/usr/bin/env bash
# Weight-only int4/int8 decode of llama2-7b on the project's Triton GEMVs, beside bf16 cuBLAS, with the
# allocator's view of where the quantized model's memory goes (about 4 min: no case starts after BUDGET_S).
# On an H200 it also re-measures the older H200 rows whose peak memory missed by more than 3%.
#   reports/models/runs/h200-weight-only-quant/run.sh DIR   (DIR/alloc.json, DIR/alloc.log; rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/quant 300 "$@"
run() { bench_case "$DIR/rows.jsonl" 90 "$@"; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
timeout 90 python3 -W ignore "$(dirname "$0")/../../../../scripts/allocator_check.py" --out "$DIR/alloc.json" \
  llama2-7b:decode:1:2048:graph::int4 llama2-7b:decode:1:2048:graph::bf16:triton llama2-7b:decode:16:2048:graph::bf16:triton llama2-7b:decode:1:2048:graph::bf16 \
  >"$DIR/alloc.log" 2>&1 || echo "exit $?" >>"$DIR/alloc.log"
run llama2-7b --phase decode --batch 1,16 --seq 2048 --kernels triton --dtype int4 --mode graph
run llama2-7b --phase decode --batch 1,16 --seq 2048 --kernels triton --dtype int8 --mode graph
run llama2-7b --phase decode --batch 1,16 --seq 2048 --kernels triton --mode graph
case "$GPU" in *H200*)
  run llama2-7b --phase prefill --batch 8 --seq 2048 --mode graph
  run qwen2.5-7b --phase prefill --batch 4 --seq 2048 --mode graph
  run phi-2 --phase prefill --batch 4 --seq 2048 --mode graph
  run gpt2 --phase prefill --batch 8 --seq 1024 --mode graph
  run gpt2 --phase decode --batch 1,16,64 --seq 1023 --mode graph
  run mixtral-8x7b --layers 4 --phase prefill --batch 4 --seq 2048 --mode eager ;;
esac
models_done
