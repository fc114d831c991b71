#!/usr/bin/env bash
# New rows, measured after the decode split-K rule by rows and K (few-tile GEMMs split from K 4096 up
# to 8 rows, K 3584 from 9; tiles of 16 rows) and the memory-bound kernels' own fixed cost
# (reports/models/notes.md, "Decode split-K per shape"): CUDA-graph decodes at batch sizes not
# measured before, around the rule's 8 / 9-row and 16-row-tile edges. Nothing was chosen on these
# rows. Predicted splitKreduce launches per layer (the rule, written before they ran):
# gemma2-9b B2 2 (o, down; cuBLAS ran 3 at B1-B8), B12 5; llama3-8b B12 5; mistral-7b B24 3 (k, v,
# down); phi-2 B12 1; falcon-7b B12 3.
# For reports/models/ (--fresh): one H100, <= 150 s.
#   reports/models/runs/h100-decode-splitk-edges/run.sh DIR     (rows -> DIR/models.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/check6}
mkdir -p "$DIR"
BUDGET_S=${BUDGET_S:-120}
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
run() { bench_case "$DIR/models.jsonl" 45 "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DIR/log.md" 2>&1
run gemma2-9b --phase decode --batch 2,12 --seq 2048 --mode graph
run llama3-8b --phase decode --batch 12 --seq 2048 --mode graph
run mistral-7b --phase decode --batch 24 --seq 2048 --mode graph
run phi-2 --phase decode --batch 12 --seq 2048 --mode graph
run falcon-7b --phase decode --batch 12 --seq 2048 --mode graph
echo "done t=${SECONDS}s" >>"$DIR/log.md"
