#!/usr/bin/env bash
# Whole-model rows on cases the roofline's --impl torch structure was not chosen on (other batch
# sizes and sequence lengths, the held-out families), for reports/models/.
#   scripts/device_models_fresh.sh DIR [fresh|fitset]   (rows -> DIR/models.jsonl, tables -> DIR/log.md)
# fitset: the cases of the calibration's fit set (gpt2, llama2-7b, pythia-1.4b, qwen2.5-7b, TinyLlama)
# again, for a fit on the card the fresh rows ran on.
set -u
DIR=${1:-reports/models/fresh}
SET=${2:-fresh}
mkdir -p "$DIR"
TINY=reports/models/configs/tinyllama-1.1b
BUDGET_S=${BUDGET_S:-300}
run() {
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "## skipped (time): $*" >>"$DIR/log.md"; return; fi
  echo "## mlsys bench model $*  (t=${SECONDS}s)" >>"$DIR/log.md"
  timeout 150 python3 -W ignore -m mlsyscalc bench model --quiet --reps 6 --out "$DIR/models.jsonl" --format markdown "$@" \
    >>"$DIR/log.md" 2>&1 || echo "exit $?" >>"$DIR/log.md"
}
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
