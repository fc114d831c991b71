#!/usr/bin/env bash
# Held-out rows for the few-CTA cap of skinny GEMMs (docs/roofline.md, "Few-CTA GEMMs": a plain GEMM
# of at most 64 rows streams at most 59 GB/s a CTA, ceil(N / 64) CTAs) on models never measured
# before. Nothing was chosen on these rows. The roofline's price (--impl torch, H100-SXM datasheet,
# commit that adds this script) without -> with the cap, written before they ran:
#   gpt2-xl decode ctx1023 B1 / B8 / B32: 2.885 -> 3.140 / 3.805 -> 4.065 / 6.459 -> 6.740 ms
#     (1600 x 1600 q/k/v/o: 25 CTAs, 5.1 MB: 3.5 us of streaming a kernel instead of 2.0)
#   opt-350m decode ctx1024 B1 / B8 / B32: 1.204 -> 1.211 / 1.401 -> 1.411 / 2.234 -> 2.255 ms
#   qwen2.5-0.5b decode ctx2048 B1 / B8 / B32: 1.722 / 1.797 / 2.040 -> 2.057 ms (896-wide GEMMs stay
#     at the 2.15 us floor)
#   train steps (graph) unchanged: qwen2.5-0.5b B4 S1024 49.6 ms, gpt2-xl B2 S1024 76.4 ms
# For reports/models/ (--fresh): one H100, <= 300 s.
#   scripts/device_models_fewcta.sh DIR     (rows -> DIR/models.jsonl, tables -> DIR/log.md)
set -u
DIR=${1:-reports/models/fewcta}
mkdir -p "$DIR"
BUDGET_S=${BUDGET_S:-270}
. "$(dirname "$0")/device_models_lib.sh"
run() { bench_case "$DIR/models.jsonl" 80 "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DIR/log.md" 2>&1
run gpt2-xl --phase decode --batch 1,8,32 --seq 1023 --mode graph
run opt-350m --phase decode --batch 1,8,32 --seq 1024 --mode graph
run qwen2.5-0.5b --phase decode --batch 1,8,32 --seq 2048 --mode graph
run qwen2.5-0.5b --phase train --batch 4 --seq 1024
run gpt2-xl --phase train --batch 2 --seq 1024
echo "done t=${SECONDS}s" >>"$DIR/log.md"
