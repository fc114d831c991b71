#!/usr/bin/env bash
# Models no earlier call measured on this card, held out from every pricing choice made so far: a DeepSeek-V2-Lite
# shape (MLA with 16 heads and no query compression, 64 routed experts of 1408 + 2 shared, top 6: its config.json
# values set on the deepseek-v3 spec, 15.7 B parameters as `mlsys params` counts), opt-350m (OPT: learned positions,
# ReLU, biases), phi3-mini, qwen2.5-0.5b (tied head, 14 heads of 64 over 2 KV heads), gpt2-xl and llama2-13b, under
# CUDA graphs: decode B1/B8/B32 at ctx 2048, prefill B1 S2048, one training step (fewer layers where the model and
# its AdamW state exceed the card). About 8 min; no case starts after BUDGET_S.
#   reports/models/runs/h100-unseen-models/run.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/unseen 480 "$@"
run() { bench_case "$DIR/rows.jsonl" 150 "$@" --mode graph; }
run "${V2LITE[@]}" --phase decode --batch 1,8,32 --seq 2048
run "${V2LITE[@]}" --phase prefill --batch 1 --seq 2048
run opt-350m --phase decode --batch 1,8,32 --seq 2047
run phi3-mini --phase decode --batch 1,8,32 --seq 2048
run qwen2.5-0.5b --phase decode --batch 1,8,32 --seq 2048
run opt-350m --phase prefill --batch 1 --seq 2048
run phi3-mini --phase prefill --batch 1 --seq 2048
run qwen2.5-0.5b --phase prefill --batch 1 --seq 2048
run opt-350m --phase train --batch 1 --seq 2048
run qwen2.5-0.5b --phase train --batch 1 --seq 2048
run phi3-mini --layers 16 --phase train --batch 1 --seq 2048
run "${V2LITE[@]}" --layers 4 --phase train --batch 1 --seq 2048
run gpt2-xl --phase decode --batch 1,8,32 --seq 1023
run llama2-13b --phase decode --batch 1,8,32 --seq 2048
run gpt2-xl --phase train --batch 1 --seq 1024
run llama2-13b --layers 8 --phase train --batch 1 --seq 2048
models_done
