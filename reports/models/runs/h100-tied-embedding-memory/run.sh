#!/usr/bin/env bash
# Held-out check of the memory calculator's backward-end phase (autograd's tied-embedding gradients,
# calc.memory.schedule.embedding_grad_blocks): training steps of tied-embedding models where the model puts the
# peak there, none of which the phase was read off (it was read off falcon-40b's 2-layer trace): gemma2-9b with 1
# layer at S512 (256,000 x 3,584 table: backward end 13.4 GiB against 9.9 at the start of backward), opt-6.7b with
# 2 layers at S512, gpt2-xl with 4 layers at S256, and falcon-40b with 1 and 3 layers at S2048 and 2 at S1024 (the
# H200 rows' shapes, on this card). Eager steps (the peak is the same step's); about 2 min. No case starts after
# BUDGET_S.
#   reports/models/runs/h100-tied-embedding-memory/run.sh DIR   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/tied_memory 240 "${1:-reports/models/tied_memory}"
run() { bench_case "$DIR/rows.jsonl" 90 "$@" --mode eager --phase train --batch 1; }
run gemma2-9b --layers 1 --seq 512
run opt-6.7b --layers 2 --seq 512
run gpt2-xl --layers 4 --seq 256
run falcon-40b --layers 1 --seq 2048
run falcon-40b --layers 3 --seq 2048
run falcon-40b --layers 2 --seq 1024
models_done
