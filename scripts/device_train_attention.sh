#!/usr/bin/env bash
# One GPU's training step with SDPA's FLASH backend (FlashAttention-2) against torch's default choice, at three
# sequence lengths (the attention's share of the step grows with S), for `mlsys train --attention flash2`; then
# the card's matmul ceilings (`mlsys bench ceilings`: bf16 and fp8 peaks, for Efficiency.matmul_fp8).
#   scripts/device_train_attention.sh DIR     rows -> DIR/train_rows.jsonl, DIR/ceilings.json; log -> DIR/log.txt
# Score: python scripts/validate/train_compare.py DIR/train_rows.jsonl --cluster hgx-h100 --framework torch
# BUDGET_S (default 420): start nothing after it. EXTRA: more train_measure flags (a CPU dry run:
# EXTRA="--device cpu --tiny" with SEQS="32:2 64:1").
set -u
DIR=${1:?usage: scripts/device_train_attention.sh DIR}
mkdir -p "$DIR"
export PYTHONUNBUFFERED=1
BUDGET_S=${BUDGET_S:-420}
LOG="$DIR/log.txt"
. "$(dirname "$0")/device_train_lib.sh"  # step
{ nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"; } >>"$LOG" 2>&1
for pair in ${SEQS:-2048:2 8192:1 16384:1}; do  # SEQ:SEQUENCES_PER_GPU
  for backend in default flash; do
    step 150 python3 -m torch.distributed.run --standalone --nproc_per_node 1 scripts/train_measure.py --case single \
      --seq "${pair%%:*}" --seqs-per-gpu "${pair##*:}" --sdpa-backend "$backend" --no-host-probe --warmup 3 --steps 8 \
      --out "$DIR" ${EXTRA:-}
  done
done
[ -z "${EXTRA:-}" ] && step 200 python3 -m mlsyscalc bench ceilings --out "$DIR/ceilings.json"
echo "## done (t=${SECONDS}s)" >>"$LOG"
