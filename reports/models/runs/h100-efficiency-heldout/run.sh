#!/usr/bin/env bash
# Whole-model rows out of sample for the roofline's efficiency classes and --impl torch backward
# kernels (chosen on reports/models/h100*.jsonl): training steps of other shapes and families,
# prefill of the held-out families at new shapes, and the prefill memory cases re-measured with a
# graph row's peak taken from an eager step.
#   reports/models/runs/h100-efficiency-heldout/run.sh DIR   (rows -> DIR/models.jsonl and DIR/memcheck.jsonl, log -> DIR/log.md)
set -u
DIR=${1:-reports/models/holdout}
mkdir -p "$DIR"
TINY=reports/models/configs/tinyllama-1.1b
BUDGET_S=${BUDGET_S:-450}
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
run() { local out=$1; shift; bench_case "$DIR/$out" 120 "$@"; }
run models.jsonl "$TINY" --phase train --batch 2 --seq 2048
run models.jsonl qwen2.5-7b --layers 4 --phase train --batch 2 --seq 2048
run models.jsonl mistral-7b --layers 4 --phase train --batch 1 --seq 2048
run models.jsonl phi-2 --phase train --batch 1 --seq 2048
run models.jsonl pythia-1.4b --phase train --batch 2 --seq 1024
run models.jsonl llama3-8b --layers 4 --phase train --batch 2 --seq 1024
run models.jsonl gpt2 --phase train --batch 4 --seq 1024
run models.jsonl gemma2-9b --layers 4 --phase train --batch 1 --seq 2048
run models.jsonl falcon-7b --layers 4 --phase train --batch 1 --seq 2048
run memcheck.jsonl llama2-7b --phase prefill --batch 4 --seq 4096 --mode graph
run models.jsonl phi-2 --phase prefill --batch 2 --seq 2048 --mode graph
run models.jsonl mistral-7b --phase prefill --batch 1 --seq 4096 --mode graph
run models.jsonl llama3-8b --phase prefill --batch 4 --seq 2048 --mode graph
run memcheck.jsonl qwen2.5-7b --phase prefill --batch 4 --seq 2048 --mode graph
run models.jsonl falcon-7b --phase prefill --batch 4 --seq 1024 --mode graph
run memcheck.jsonl llama2-7b --phase prefill --batch 2 --seq 4096 --mode graph
run models.jsonl gemma2-9b --phase prefill --batch 1 --seq 4096 --mode graph
