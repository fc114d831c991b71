#!/usr/bin/env bash
# A third MoE shape, held out from the MoE pricing (the dispatch kernel list and the grouped GEMM's per-SM cap were
# taken from mixtral-8x7b and checked on deepseek-v3): OLMoE-1B-7B's shape (allenai/OLMoE-1B-7B-0924 config.json:
# hidden 2048, 16 layers, 16 heads, 64 experts of 1024, top 8, vocabulary 50304; its q/k norms left out) built as a
# mixtral-type model, under CUDA graphs (about 2 min).
#   scripts/device_models_olmoe.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/olmoe}
mkdir -p "$DIR"
BUDGET_S=${BUDGET_S:-150}
. "$(dirname "$0")/device_models_lib.sh"
OLMOE=(--set hidden_size=2048 --set num_attention_heads=16 --set num_key_value_heads=16 --set intermediate_size=1024
       --set num_local_experts=64 --set num_experts_per_tok=8 --set num_hidden_layers=16 --set vocab_size=50304)
run() { bench_case "$DIR/rows.jsonl" 120 mixtral-8x7b "${OLMOE[@]}" --mode graph "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DIR/log.md" 2>&1
run --phase decode --batch 1,16,64 --seq 2048
run --phase prefill --batch 1,4 --seq 2048
run --phase train --batch 2 --seq 2048
echo "done t=${SECONDS}s" >>"$DIR/log.md"
