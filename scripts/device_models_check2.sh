#!/usr/bin/env bash
# Whole-model rows measured before the roofline's gpt2 lm_head bandwidth, launch-cost and host-path
# changes were made, on cases no row holds yet: gpt2 decode at other batches and contexts (eager too),
# held-out decodes at small batches (where the fixed cost per kernel weighs most), small-model eager
# training steps (host-bound), and a few prefills.
#   scripts/device_models_check2.sh DIR   (rows -> DIR/models.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/check2}
mkdir -p "$DIR"
TINY=reports/models/configs/tinyllama-1.1b
BUDGET_S=${BUDGET_S:-330}
run() {
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "## skipped (time): $*" >>"$DIR/log.md"; return; fi
  echo "## mlsys bench model $*  (t=${SECONDS}s)" >>"$DIR/log.md"
  timeout 100 python3 -W ignore -m mlsyscalc bench model --quiet --reps 6 --out "$DIR/models.jsonl" --format markdown "$@" \
    >>"$DIR/log.md" 2>&1 || echo "exit $?" >>"$DIR/log.md"
}
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
