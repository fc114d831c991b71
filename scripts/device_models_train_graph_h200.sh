#!/usr/bin/env bash
# The training steps of reports/models' H200 table (the TinyLlama-shape B4 / B8 S2048 steps first), replayed
# from a CUDA graph beside the eager steps of the same process, on one H200. For reports/models/h200 (rows ->
# reports/models/h200_train_graph.jsonl). <= 200 s.
#   scripts/device_models_train_graph_h200.sh DIR     (rows -> DIR/models.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/train_graph_h200}
mkdir -p "$DIR"
BUDGET_S=${BUDGET_S:-170}
. "$(dirname "$0")/device_models_lib.sh"
run() { bench_case "$DIR/models.jsonl" 90 "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$DIR/log.md" 2>&1
run reports/models/configs/tinyllama-1.1b --phase train --batch 4,8 --seq 2048
run pythia-1.4b --phase train --batch 1 --seq 2048
run phi-2 --phase train --batch 1 --seq 2048
run gpt2 --phase train --batch 8 --seq 1024
run llama3-8b --phase train --batch 2 --seq 1024 --layers 4
echo "done t=${SECONDS}s" >>"$DIR/log.md"
