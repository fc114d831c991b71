#!/usr/bin/env bash
# The held-out decode rows whose calibrated error on a card's page is beyond 5%, measured again with the
# back-to-back timing `mlsys bench model` records for one-GPU graph rows (back_to_back_ms, launch_wait_ms):
# does the calibrated model describe the replay's kernels, with the residual the launch wait of a replay timed
# alone? At the contexts of the page's rows. About 3-4 min; no case starts after BUDGET_S.
#   reports/models/runs/h100-h200-launch-wait/run.sh DIR [h200|h100]   (rows -> DIR/rows.jsonl, tables -> DIR/log.md)
#   h200 (default): falcon-7b B16, gemma2-9b B16, mistral-7b B16, phi-2 B1/B16, phi3-mini B8, opt-6.7b B8,
#                   gpt2-xl B8, opt-350m B1/B32, qwen2.5-0.5b B1/B32 (reports/models/h200)
#   h100: falcon-7b B8, gemma2-9b B12/B16, gpt2-xl B8, phi-2 B8, phi3-mini B1/B8, qwen2.5-0.5b B1, opt-6.7b B32,
#         llama3-8b B64 (reports/models)
set -u
. "$(dirname "$0")/../../../../scripts/device_models_lib.sh"
models_call reports/models/launch_wait 360 "${1:-reports/models/launch_wait}"
run() { bench_case "$DIR/rows.jsonl" 90 "$@" --mode graph; }
if [ "${2:-h200}" = h100 ]; then
  run falcon-7b --phase decode --batch 8 --seq 2048
  run gemma2-9b --phase decode --batch 12,16 --seq 2048
  run gpt2-xl --phase decode --batch 8 --seq 1023
  run phi-2 --phase decode --batch 8 --seq 2048
  run phi3-mini --phase decode --batch 1,8 --seq 2048
  run qwen2.5-0.5b --phase decode --batch 1 --seq 2048
  run opt-6.7b --phase decode --batch 32 --seq 2047
  run llama3-8b --phase decode --batch 64 --seq 2048
else
  run falcon-7b --phase decode --batch 16 --seq 2048
  run gemma2-9b --phase decode --batch 16 --seq 2048
  run mistral-7b --phase decode --batch 16 --seq 2048
  run phi-2 --phase decode --batch 1,16 --seq 2048
  run phi3-mini --phase decode --batch 8 --seq 2048
  run opt-6.7b --phase decode --batch 8 --seq 2047
  run gpt2-xl --phase decode --batch 8 --seq 1023
  run opt-350m --phase decode --batch 1,32 --seq 2047
  run qwen2.5-0.5b --phase decode --batch 1,32 --seq 2048
fi
models_done
