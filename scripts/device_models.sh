#!/usr/bin/env bash
# Whole-model validation on one GPU: `mlsys bench model` over the cases of reports/models/.
#   scripts/device_models.sh smoke|full DIR   (rows -> DIR/models.jsonl, tables -> DIR/log.md)
# A rerun with the same DIR skips the rows already measured.
set -u
SET=${1:-smoke}
DIR=${2:-reports/models}
mkdir -p "$DIR"
TINY=reports/models/configs/tinyllama-1.1b
run() { echo "## mlsys bench model $*" >>"$DIR/log.md"; timeout 300 python3 -m mlsyscalc bench model --quiet \
        --out "$DIR/models.jsonl" --format markdown "$@" >>"$DIR/log.md" 2>&1 || echo "exit $?" >>"$DIR/log.md"; }

if [ "$SET" = smoke ]; then
  run llama2-7b --phase prefill --batch 1 --seq 512
  run llama2-7b --phase decode --batch 1 --seq 2048
  run "$TINY" --phase train --batch 4 --seq 2048
  run deepseek-v3 --layers 4 --phase decode --batch 1 --seq 512 --mode eager
  run llama2-7b --layers 4 --phase decode --batch 1 --seq 2048 --kernels triton --dtype int4
  run phi-2 --phase prefill --batch 1 --seq 512 --kernels triton
  exit 0
fi
# the llama2-7b / TinyLlama cases
run llama2-7b --phase prefill --batch 1 --seq 512,2048
run llama2-7b --phase prefill --batch 8 --seq 2048
run llama2-7b --phase decode --batch 1,16,64 --seq 2048
run "$TINY" --phase train --batch 4,8 --seq 2048
# the project's kernels in the model: flash prefill, paged decode, weight-only int8/int4 GEMVs
run llama2-7b --phase prefill --batch 1 --seq 2048 --kernels triton
run llama2-7b --phase decode --batch 1,16,64 --seq 2048 --kernels triton --mode graph
run llama2-7b --phase decode --batch 1,16 --seq 2048 --kernels triton --dtype int4 --mode graph
run llama2-7b --phase decode --batch 1,16 --seq 2048 --kernels triton --dtype int8 --mode graph
# other families (--layers where the whole model does not fit one card or takes too long)
run qwen2.5-7b --phase prefill --batch 1,4 --seq 2048
run qwen2.5-7b --phase decode --batch 1,16,64 --seq 2048 --mode graph
run mistral-7b --phase decode --batch 1,16 --seq 2048 --mode graph
run llama3-8b --phase prefill --batch 2 --seq 2048
run llama3-8b --layers 8 --phase train --batch 2 --seq 2048
run gemma2-9b --phase prefill --batch 1 --seq 2048
run gemma2-9b --phase decode --batch 1,16 --seq 2048 --mode graph
run phi-2 --phase prefill --batch 4 --seq 2048
run phi-2 --phase decode --batch 1,16,64 --seq 2048 --mode graph
run phi-2 --phase train --batch 4 --seq 2048
run falcon-7b --phase prefill --batch 2 --seq 2048
run falcon-7b --phase decode --batch 1,16 --seq 2048 --mode graph
run gpt2 --phase prefill --batch 8 --seq 1024
run gpt2 --phase decode --batch 1,16,64 --seq 1023 --mode graph
run gpt2 --phase train --batch 8 --seq 1024
run pythia-1.4b --phase train --batch 4 --seq 2048
run pythia-1.4b --phase decode --batch 1,16 --seq 2048 --mode graph
run mixtral-8x7b --layers 4 --phase prefill --batch 1,4 --seq 2048
run mixtral-8x7b --layers 4 --phase decode --batch 1,16,64 --seq 2048
run deepseek-v3 --layers 4 --phase prefill --batch 1 --seq 2048
run deepseek-v3 --layers 4 --phase decode --batch 1,16 --seq 2048
