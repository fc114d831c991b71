#!/usr/bin/env bash
# Held-out check of the absorbed-MLA decode pricing (SDPA's memory-efficient kernel: its grid of
# batch x ceil(heads / 32) CTAs, one CTA's walk at 0.100 of an SM, a full SM at 0.150; chosen on
# deepseek-v3's H200 decode B1 row). Three MLA shapes it was not chosen on, under CUDA graphs:
#  - DeepSeek-V2-Lite's shape (V2LITE of device_models_lib.sh), all layers: 1 CTA a sequence;
#  - the same with 64 heads and a 256-wide latent (Q/K 320, V 256: half the FLOPs a CTA), 4 layers;
#  - deepseek-v3 (4 layers) decode B32 (128 CTAs, one an SM) and B64 (256 CTAs: 2 on the busiest SM).
# About 5 min on an H100.
#   reports/models/runs/h200-mla-decode-heldout/run.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/mla 480 "$@"
LATENT256=("${V2LITE[@]}" --set num_attention_heads=64 --set num_key_value_heads=64 --set kv_lora_rank=256)
run() { bench_case "$DIR/rows.jsonl" 150 "$@" --mode graph; }
run "${V2LITE[@]}" --phase decode --batch 1,16,64 --seq 2048
run "${LATENT256[@]}" --layers 4 --phase decode --batch 1,16 --seq 2048
run deepseek-v3 --layers 4 --phase decode --batch 32,64 --seq 2048
run "${V2LITE[@]}" --phase prefill --batch 1 --seq 2048
models_done
