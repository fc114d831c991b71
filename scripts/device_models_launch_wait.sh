#!/usr/bin/env bash
# The held-out decode rows whose calibrated error on the H200 page is beyond 5%, measured again with the
# back-to-back timing `mlsys bench model` records for one-GPU graph rows (back_to_back_ms, launch_wait_ms):
# does the calibrated model describe the replay's kernels, with the residual the launch wait of a replay timed
# alone? falcon-7b B16, gemma2-9b B16, mistral-7b B16, phi-2 B1/B16, phi3-mini B8, opt-6.7b B8, gpt2-xl B8,
# opt-350m B1/B32, qwen2.5-0.5b B1/B32, at the contexts of the page's rows. About 4 min; no case starts after
# BUDGET_S.
#   scripts/device_models_launch_wait.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
. "$(dirname "$0")/device_models_lib.sh"
models_call reports/models/launch_wait 360 "$@"
run() { bench_case "$DIR/rows.jsonl" 90 "$@" --mode graph; }
run falcon-7b --phase decode --batch 16 --seq 2048
run gemma2-9b --phase decode --batch 16 --seq 2048
run mistral-7b --phase decode --batch 16 --seq 2048
run phi-2 --phase decode --batch 1,16 --seq 2048
run phi3-mini --phase decode --batch 8 --seq 2048
run opt-6.7b --phase decode --batch 8 --seq 2047
run gpt2-xl --phase decode --batch 8 --seq 1023
run opt-350m --phase decode --batch 1,32 --seq 2047
run qwen2.5-0.5b --phase decode --batch 1,32 --seq 2048
models_done
