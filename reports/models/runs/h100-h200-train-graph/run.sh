#!/usr/bin/env bash
# Training steps replayed from a CUDA graph beside the same steps issued eagerly, in one process a model:
# the graph row is the GPU's time of the step (no host paces it), so the roofline's GPU side is tested on
# the small models whose eager steps the host sets (reports/models/README.md, "The host measured on the
# machine itself"). Nothing is fitted here.
#   h100 (default, <= 300 s): fit-set models first (gpt2, TinyLlama, pythia: the host-bound rows), then
#        held-out families (phi-2; llama3-8b, mistral-7b, gemma2-9b, falcon-7b with 4 layers); for reports/models/
#   h200 (<= 200 s): the training steps of reports/models/h200's table, the TinyLlama-shape B4 / B8 S2048
#        steps first; rows -> reports/models/h200_train_graph.jsonl
#   reports/models/runs/h100-h200-train-graph/run.sh DIR [h100|h200]   (rows -> DIR/models.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/train_graph}
CARD=${2:-h100}
mkdir -p "$DIR"
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
TINY=reports/models/configs/tinyllama-1.1b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$DIR/log.md" 2>&1
if [ "$CARD" = h200 ]; then
  BUDGET_S=${BUDGET_S:-170}
  run() { bench_case "$DIR/models.jsonl" 90 "$@"; }
  run $TINY --phase train --batch 4,8 --seq 2048
  run pythia-1.4b --phase train --batch 1 --seq 2048
  run phi-2 --phase train --batch 1 --seq 2048
  run gpt2 --phase train --batch 8 --seq 1024
  run llama3-8b --phase train --batch 2 --seq 1024 --layers 4
else
  BUDGET_S=${BUDGET_S:-270}
  run() { bench_case "$DIR/models.jsonl" 100 "$@"; }
  run gpt2 --phase train --batch 2,8 --seq 512,1024
  run $TINY --phase train --batch 1,4 --seq 1024
  run $TINY --phase train --batch 2 --seq 512,2048
  run phi-2 --phase train --batch 1 --seq 1024,2048
  run pythia-1.4b --phase train --batch 1 --seq 2048
  run llama3-8b --phase train --batch 2 --seq 1024 --layers 4
  run mistral-7b --phase train --batch 1 --seq 2048 --layers 4
  run gemma2-9b --phase train --batch 1 --seq 2048 --layers 4
  run falcon-7b --phase train --batch 1 --seq 2048 --layers 4
fi
echo "done t=${SECONDS}s" >>"$DIR/log.md"
