#!/usr/bin/env bash
# Held-out check of the absorbed-MLA decode pricing (SDPA's memory-efficient kernel: its grid of
# batch x ceil(heads / 32) CTAs, one CTA's walk at 0.100 of an SM, a full SM at 0.150; chosen on
# deepseek-v3's H200 decode B1 row). Three MLA shapes it was not chosen on, under CUDA graphs:
#  - DeepSeek-V2-Lite's shape (deepseek-ai/DeepSeek-V2-Lite config.json: hidden 2048, 27 layers, 16 heads,
#    no query compression, latent 512 + rope 64, 64 experts of 1408, top 6, 2 shared, first layer dense,
#    vocabulary 102400; 15.7 B parameters) built as a deepseek_v3-type model, all layers: 1 CTA a sequence;
#  - the same with 64 heads and a 256-wide latent (Q/K 320, V 256: half the FLOPs a CTA), 4 layers;
#  - deepseek-v3 (4 layers) decode B32 (128 CTAs, one an SM) and B64 (256 CTAs: 2 on the busiest SM).
# About 5 min on an H100.
#   scripts/device_models_mla.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/mla}
mkdir -p "$DIR"
BUDGET_S=${BUDGET_S:-480}
. "$(dirname "$0")/device_models_lib.sh"
V2LITE=(--set hidden_size=2048 --set num_hidden_layers=27 --set num_attention_heads=16 --set num_key_value_heads=16
        --set q_lora_rank=null --set kv_lora_rank=512 --set n_routed_experts=64 --set num_experts_per_tok=6
        --set n_shared_experts=2 --set moe_intermediate_size=1408 --set intermediate_size=10944
        --set first_k_dense_replace=1 --set vocab_size=102400)
LATENT256=("${V2LITE[@]}" --set num_attention_heads=64 --set num_key_value_heads=64 --set kv_lora_rank=256)
run() { bench_case "$DIR/rows.jsonl" 150 deepseek-v3 --mode graph "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DIR/log.md" 2>&1
run "${V2LITE[@]}" --phase decode --batch 1,16,64 --seq 2048
run "${LATENT256[@]}" --layers 4 --phase decode --batch 1,16 --seq 2048
run --layers 4 --phase decode --batch 32,64 --seq 2048
run "${V2LITE[@]}" --phase prefill --batch 1 --seq 2048
echo "done t=${SECONDS}s" >>"$DIR/log.md"
