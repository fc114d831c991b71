#!/usr/bin/env bash
# Whole-model rows on cases the roofline's --impl torch structure was not chosen on (other batch
# sizes and sequence lengths, the held-out families), for reports/models/.
#   reports/models/runs/h100-torch-impl-heldout/run.sh DIR [fresh|fitset|host]   (rows -> DIR/models.jsonl, tables -> DIR/log.md)
# fitset: the cases of the calibration's fit set (gpt2, llama2-7b, pythia-1.4b, qwen2.5-7b, TinyLlama)
# again, for a fit on the card the fresh rows ran on.
# host: cases where the host or the fixed cost per kernel weighs most (gpt2 decode at other batches and
# contexts, eager too; held-out decodes at small batches; small models' eager training steps; a few
# prefills): reports/models/h100_torch_impl_host.jsonl, measured before the host path, GEMM floor and unaligned
# stream were added to the roofline.
set -u
DIR=${1:-reports/models/fresh}
SET=${2:-fresh}
mkdir -p "$DIR"
TINY=reports/models/configs/tinyllama-1.1b
BUDGET_S=${BUDGET_S:-300}
LIMIT_S=150
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
run() { bench_case "$DIR/models.jsonl" "$LIMIT_S" "$@"; }
if [ "$SET" = host ]; then
  LIMIT_S=100
  run gpt2 --phase decode --batch 2,4,128 --seq 1023 --mode graph
  run gpt2 --phase decode --batch 16 --seq 511 --mode graph
  run gpt2 --phase decode --batch 1,16 --seq 1023 --mode eager
  run "$TINY" --phase train --batch 1 --seq 1024,2048
  run "$TINY" --phase train --batch 4 --seq 512
  run gpt2 --phase train --batch 2 --seq 1024
  run gpt2 --phase train --batch 8 --seq 512
  run phi-2 --phase decode --batch 1,8 --seq 2048 --mode graph
  run pythia-1.4b --phase train --batch 1 --seq 2048
  run mistral-7b --phase decode --batch 1,16 --seq 2048 --mode graph
  run llama3-8b --phase decode --batch 1,4 --seq 4096 --mode graph
  run falcon-7b --phase decode --batch 1,8 --seq 2048 --mode graph
  run gemma2-9b --phase decode --batch 1,16 --seq 2048 --mode graph
  run phi-2 --phase decode --batch 4 --seq 2048 --mode eager
  run qwen2.5-7b --phase decode --batch 4,32 --seq 4096 --mode graph
  run phi-2 --phase train --batch 1 --seq 1024
  run gpt2 --phase prefill --batch 2 --seq 1024 --mode graph
  run phi-2 --phase prefill --batch 1 --seq 1024 --mode graph
  run mistral-7b --phase prefill --batch 2 --seq 2048 --mode graph
  exit 0
fi
if [ "$SET" = fitset ]; then
  run llama2-7b --phase decode --batch 1,16,64 --seq 2048 --mode graph
  run llama2-7b --phase prefill --batch 1 --seq 512,2048 --mode graph
  run "$TINY" --phase train --batch 4,8 --seq 2048
  run qwen2.5-7b --phase decode --batch 1,16,64 --seq 2048 --mode graph
  run qwen2.5-7b --phase prefill --batch 1,4 --seq 2048 --mode graph
  run gpt2 --phase decode --batch 1,16,64 --seq 1023 --mode graph
  run gpt2 --phase prefill --batch 8 --seq 1024 --mode graph
  run pythia-1.4b --phase train --batch 4 --seq 2048
  run gpt2 --phase train --batch 8 --seq 1024
  run llama2-7b --phase prefill --batch 8 --seq 2048 --mode graph
  exit 0
fi
run llama2-7b --phase decode --batch 2,4,8,32,64 --seq 2048 --mode graph
run llama2-7b --phase decode --batch 64 --seq 2048 --kernels triton --mode graph
run llama2-7b --phase decode --batch 64 --seq 2048 --mode eager
run llama2-7b --phase prefill --batch 2,4 --seq 1024,4096 --mode graph
run mistral-7b --phase decode --batch 4,32 --seq 4096 --mode graph
run llama3-8b --phase prefill --batch 2 --seq 1024 --mode graph
run llama3-8b --phase decode --batch 8,32 --seq 1024 --mode graph
run phi-2 --phase decode --batch 4,32 --seq 1024 --mode graph
run phi-2 --phase train --batch 2 --seq 1024
run falcon-7b --phase decode --batch 4,32 --seq 1024 --mode graph
run gemma2-9b --phase decode --batch 4 --seq 1024 --mode graph
run gemma2-9b --phase prefill --batch 2 --seq 1024 --mode graph
run "$TINY" --phase train --batch 2 --seq 1024
run llama3-8b --layers 8 --phase train --batch 1 --seq 4096
run falcon-7b --phase prefill --batch 1 --seq 4096 --mode graph
