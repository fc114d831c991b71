#!/usr/bin/env bash
# Held-out check of the stream's gap before each kernel (KERNEL_GAP_S) and the Hopper memory-bound cap
# (MEMORY_STREAM_SM_BPS): models no earlier call measured and that neither value was read off, under CUDA
# graphs. opt-6.7b (OPT: learned positions, ReLU, biases) decode B1/B8/B32, prefill, 8-layer training;
# llama3-70b with 4 layers (decode B1/B16, prefill) and 2 (training); falcon-40b with 4 layers (decode
# B1/B8, prefill) and 2 (training); a Qwen2.5-1.5B shape (its config.json values on qwen2.5-7b: hidden 1536,
# 28 layers, 12 heads over 2 KV heads, MLP 8960, tied head; 1.54 B parameters) decode B1/B8/B32, prefill, training. About 6 min; no case
# starts after BUDGET_S.
#   reports/models/runs/h200-gap-cap-heldout/run.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/gap_cap_check 420 "$@"
run() { bench_case "$DIR/rows.jsonl" 120 "$@" --mode graph; }
QWEN15=(qwen2.5-7b --set hidden_size=1536 --set num_hidden_layers=28 --set num_attention_heads=12
        --set num_key_value_heads=2 --set intermediate_size=8960 --set tie_word_embeddings=true)
run "${QWEN15[@]}" --phase decode --batch 1,8,32 --seq 2048
run "${QWEN15[@]}" --phase prefill --batch 1 --seq 2048
run "${QWEN15[@]}" --phase train --batch 1 --seq 2048
run opt-6.7b --phase decode --batch 1,8,32 --seq 2047
run opt-6.7b --phase prefill --batch 1 --seq 2048
run opt-6.7b --layers 8 --phase train --batch 1 --seq 2048
run llama3-70b --layers 4 --phase decode --batch 1,16 --seq 2048
run llama3-70b --layers 4 --phase prefill --batch 1 --seq 2048
run llama3-70b --layers 2 --phase train --batch 1 --seq 2048
run falcon-40b --layers 4 --phase decode --batch 1,8 --seq 2048
run falcon-40b --layers 4 --phase prefill --batch 1 --seq 2048
run falcon-40b --layers 2 --phase train --batch 1 --seq 2048
models_done
