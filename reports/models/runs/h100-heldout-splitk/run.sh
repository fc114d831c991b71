#!/usr/bin/env bash
# New held-out rows, measured after the split-K rule for long-K GEMMs of >= 128 rows and the fitted
# d64 attention (reports/models/notes.md, "Why calibrated held-out rows miss"): shapes of the held-out
# families not measured before, prefill and CUDA-graph decode. Nothing was chosen on these rows.
# For reports/models/ (--fresh): one H100, <= 150 s.
#   reports/models/runs/h100-heldout-splitk/run.sh DIR     (rows -> DIR/models.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/check5}
mkdir -p "$DIR"
BUDGET_S=${BUDGET_S:-120}
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
run() { bench_case "$DIR/models.jsonl" 45 "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DIR/log.md" 2>&1
# long-K down_proj (K = 4 N) at 512 and 2048 rows: no split-K reduction priced
run phi-2 --phase prefill --batch 1,2 --seq 512,1024 --mode graph
# few-tile decode GEMMs (N = K = 2560) and many small kernels
run phi-2 --phase decode --batch 2 --seq 2048 --mode graph
# d64 attention (attention_small_head, now fitted), prefill and decode
run falcon-7b --phase prefill --batch 2 --seq 2048 --mode graph
run falcon-7b --phase decode --batch 2 --seq 1024 --mode graph
run gemma2-9b --phase decode --batch 8 --seq 2048 --mode graph
run mistral-7b --phase decode --batch 8 --seq 1024 --mode graph
run llama3-8b --phase prefill --batch 1 --seq 2048 --mode graph
echo "done t=${SECONDS}s" >>"$DIR/log.md"
