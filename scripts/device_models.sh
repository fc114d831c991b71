#!/usr/bin/env bash
# Whole-model validation on one GPU: `mlsys bench model` over the cases of reports/models/.
#   scripts/device_models.sh smoke|full DIR   (rows -> DIR/models.jsonl, tables -> DIR/log.md)
# A rerun with the same DIR skips the rows already measured.
set -u
SET=${1:-smoke}
DIR=${2:-reports/models}
mkdir -p "$DIR"
TINY=reports/models/configs/tinyllama-1.1b
BUDGET_S=${BUDGET_S:-520}   # start no new model after this many seconds (the device call's limit is 600)
run() {
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "## skipped (time): $*" >>"$DIR/log.md"; return; fi
  echo "## mlsys bench model $*  (t=${SECONDS}s)" >>"$DIR/log.md"
  timeout 240 python3 -W ignore -m mlsyscalc bench model --quiet --out "$DIR/models.jsonl" --format markdown "$@" \
    >>"$DIR/log.md" 2>&1 || echo "exit $?" >>"$DIR/log.md"
}

if [ "$SET" = smoke ]; then
  run llama2-7b --phase prefill --batch 1 --seq 512
  run llama2-7b --phase decode --batch 1 --seq 2048
  run "$TINY" --phase train --batch 4 --seq 2048
  run deepseek-v3 --layers 4 --phase decode --batch 1 --seq 512 --mode eager
  run llama2-7b --layers 4 --phase decode --batch 1 --seq 2048 --kernels triton --dtype int4
  run phi-2 --phase prefill --batch 1 --seq 512 --kernels triton
  exit 0
fi
if [ "$SET" = recheck ]; then   # decode attention through SDPA's own GQA; the gated triton decode rows
  run llama2-7b --phase decode --batch 1,16,64 --seq 2048 --kernels triton --mode graph
  run qwen2.5-7b --phase decode --batch 1,16,64 --seq 2048 --mode graph
  run mistral-7b --phase decode --batch 1,16 --seq 2048 --mode graph
  run falcon-7b --phase decode --batch 1,16 --seq 2048 --mode graph
  run gemma2-9b --phase decode --batch 1,16 --seq 2048 --mode graph
  run llama3-8b --phase decode --batch 1,16,64 --seq 2048 --mode graph
  run llama2-7b --phase decode --batch 1,16,64 --seq 2048 --mode graph
  run phi-2 --phase decode --batch 1,16,64 --seq 2048 --mode graph
  run mixtral-8x7b --layers 4 --phase decode --batch 1,16,64 --seq 2048 --mode eager
  run qwen2.5-7b --phase prefill --batch 1 --seq 2048 --kernels triton --mode graph
  exit 0
fi
# the llama2-7b / TinyLlama cases (graph and eager rows)
run llama2-7b --phase prefill --batch 1 --seq 512,2048
run llama2-7b --phase prefill --batch 8 --seq 2048 --mode graph
run llama2-7b --phase decode --batch 1,16,64 --seq 2048
run "$TINY" --phase train --batch 4,8 --seq 2048
# other families, graph rows (--layers where the model does not fit one card or takes long)
run qwen2.5-7b --phase prefill --batch 1,4 --seq 2048 --mode graph
run qwen2.5-7b --phase decode --batch 1,16,64 --seq 2048 --mode graph
run gpt2 --phase prefill --batch 8 --seq 1024 --mode graph
run gpt2 --phase decode --batch 1,16,64 --seq 1023 --mode graph
run gpt2 --phase train --batch 8 --seq 1024
run phi-2 --phase prefill --batch 4 --seq 2048 --mode graph
run phi-2 --phase decode --batch 1,16,64 --seq 2048 --mode graph
run phi-2 --phase train --batch 4 --seq 2048
run mixtral-8x7b --layers 4 --phase prefill --batch 1,4 --seq 2048 --mode eager
run mixtral-8x7b --layers 4 --phase decode --batch 1,16,64 --seq 2048 --mode eager
run deepseek-v3 --layers 4 --phase prefill --batch 1 --seq 2048 --mode eager
run deepseek-v3 --layers 4 --phase decode --batch 1,16 --seq 2048 --mode eager
# the project's kernels in the model: flash prefill, paged decode, weight-only int4/int8 GEMVs
run llama2-7b --phase decode --batch 1,16 --seq 2048 --kernels triton --dtype int4 --mode graph
run llama2-7b --phase decode --batch 1,16 --seq 2048 --kernels triton --dtype int8 --mode graph
run llama2-7b --phase decode --batch 1,16,64 --seq 2048 --kernels triton --mode graph
run llama2-7b --phase prefill --batch 1 --seq 2048 --kernels triton --mode graph
run gemma2-9b --phase prefill --batch 1 --seq 2048 --mode graph
run gemma2-9b --phase decode --batch 1,16 --seq 2048 --mode graph
run falcon-7b --phase prefill --batch 2 --seq 2048 --mode graph
run falcon-7b --phase decode --batch 1,16 --seq 2048 --mode graph
run llama3-8b --layers 8 --phase train --batch 2 --seq 2048
run pythia-1.4b --phase train --batch 4 --seq 2048
run mistral-7b --phase decode --batch 1,16 --seq 2048 --mode graph
