#!/usr/bin/env bash
# The host path measured on the machine itself: `mlsys bench host` (a tiny Llama's eager training and
# decode steps, and a launch loop), then the eager rows whose host sets their time, re-measured with
# the host probe that every `mlsys bench model` process runs first (rows carry host_s_per_kernel and
# host_s_per_layer), beside GPU-bound controls. For reports/models/ (--fresh): one H100, <= 300 s.
#   reports/models/runs/h100-host-path/run.sh DIR      (rows -> DIR/models.jsonl and DIR/host.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/host}
mkdir -p "$DIR"
TINY=reports/models/configs/tinyllama-1.1b
BUDGET_S=${BUDGET_S:-240}
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
run() { bench_case "$DIR/models.jsonl" 90 "$@"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; } \
  >>"$DIR/log.md" 2>&1
probe() {  # the generic probe (a tiny llama2-7b) into DIR/host.jsonl: at the start, and at the end for the drift
  echo "## mlsys bench host (t=${SECONDS}s)" >>"$DIR/log.md"
  timeout 45 python3 -W ignore -m mlsyscalc bench host --out "$DIR/host.jsonl" --format markdown >>"$DIR/log.md" 2>&1 \
    || echo "exit $?" >>"$DIR/log.md"
}
probe
# host-bound training steps (the rows the fitted 29 us per kernel misses) and their neighbours
run "$TINY" --phase train --batch 1 --seq 1024,2048
run "$TINY" --phase train --batch 2,4 --seq 512
run gpt2 --phase train --batch 2,8 --seq 512,1024
# eager decodes (host path per layer)
run gpt2 --phase decode --batch 1,16 --seq 1023 --mode eager
run phi-2 --phase decode --batch 4 --seq 2048 --mode eager
# GPU-bound controls: the probe must not move them
run "$TINY" --phase train --batch 4 --seq 2048
run phi-2 --phase train --batch 1 --seq 2048
run mistral-7b --layers 4 --phase train --batch 1 --seq 2048
if [ "$SECONDS" -lt $((BUDGET_S + 30)) ]; then probe; fi
echo "done t=${SECONDS}s" >>"$DIR/log.md"
