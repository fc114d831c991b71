#!/usr/bin/env bash
# Issue 42 on one 8-GPU host in one call (`scripts/device.sh eight-gpu` runs it with OUT=<out>/eight_gpu):
#   1. `mlsys bench comm` on all 8 GPUs: every collective, 1 KiB .. 1 GiB, eager and from CUDA graphs (held out:
#      reports/comm/predictions_8gpu.json priced these before any 8-GPU row existed)
#   2. scripts/train_measure.py on the 8 GPUs, one process a case: tp (TP 8), fsdp (FSDP2 8), tp-pp (TP 4 x PP 2),
#      fsdp-tp (TP 2 x FSDP2 4), llama2-7b (held out: reports/train/predictions_8gpu.json)
#   3. the same comm sweep on 2 and then 4 GPUs of the host (a fit on fewer GPUs of the same links)
# What each step runs comes from scripts/validate/eight_gpu_plan.py. Each step runs under its own timeout, cut to what is
# left of BUDGET_S (default 520 s of wall time); once it is spent nothing new starts. A step that fails or is cut
# short is recorded and the next one runs: $OUT/steps.jsonl has one line a step (exit status, seconds).
# Output: $OUT/comm/rows.jsonl (every GPU count, tagged by "gpus"), $OUT/train/train_rows.jsonl, $OUT/machine.txt,
# $OUT/steps.jsonl, $OUT/log.txt. Then, on any machine: python scripts/validate/score_8gpu.py <fetched OUT>/eight_gpu
# CPU dry run of the same path (gloo, tiny sizes and model; scores with --reports outside reports/):
#   BACKEND=gloo COMM_EXTRA="--max-size 4KiB" TRAIN_EXTRA="--device cpu --model tiny --seq 16 --warmup 0 --steps 1" \
#     OUT=/tmp/dry bash scripts/device_8gpu.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
BUDGET_S=${BUDGET_S:-520}
mkdir -p "$OUT/comm" "$OUT/train"
LOG="$OUT/log.txt"
STEPS="$OUT/steps.jsonl"
HERE=$(dirname "$0")
start=$(date +%s)
plan=$(python3 "$HERE/validate/eight_gpu_plan.py" shell) || { echo "scripts/validate/eight_gpu_plan.py failed" | tee -a "$LOG"; exit 1; }
eval "$plan"   # GPUS, FIT_GPUS, TRAIN_CASES; TRAIN_FLAGS, COMM_FLAGS (arrays)
read -r -a COMM_MORE <<< "${COMM_EXTRA:-}"
read -r -a TRAIN_MORE <<< "${TRAIN_EXTRA:-}"

# step NAME TIMEOUT_S COMMAND...: run it under min(TIMEOUT_S, what is left), its output in the log, its outcome in
# steps.jsonl ("exit" 124: cut at the timeout); nothing starts with less than 20 s left
step() {
  local name=$1 limit=$2 t0 rc; shift 2
  t0=$(( $(date +%s) - start ))
  local left=$(( BUDGET_S - t0 ))
  if [ "$left" -lt 20 ]; then
    echo "## $name skipped: budget spent (t=${t0}s)" >>"$LOG"
    printf '{"step": "%s", "skipped": "budget spent", "at_s": %d}\n' "$name" "$t0" >>"$STEPS"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "## $name: $*  (t=${t0}s, limit ${limit}s)" >>"$LOG"
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1   # TERM (then KILL) to the whole group: torchrun's workers too
  rc=$?
  printf '{"step": "%s", "exit": %d, "at_s": %d, "wall_s": %d, "limit_s": %d}\n' \
    "$name" "$rc" "$t0" $(( $(date +%s) - start - t0 )) "$limit" >>"$STEPS"
  echo "## $name exit $rc" >>"$LOG"
}
comm() {  # NPROC TIMEOUT_S
  step "comm-$1" "$2" python3 -m mlsyscalc bench comm --nproc "$1" "${COMM_FLAGS[@]}" --backend "${BACKEND:-nccl}" \
    --out "$OUT/comm/rows.jsonl" --format markdown "${COMM_MORE[@]}"
}
train() {  # CASE TIMEOUT_S
  step "train-$1" "$2" python3 -m torch.distributed.run --standalone --nproc_per_node "$GPUS" "$HERE/train_measure.py" \
    --case "$1" --out "$OUT/train" "${TRAIN_FLAGS[@]}" "${TRAIN_MORE[@]}"
}

{ echo "commit ${MLSYS_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi -L; nvidia-smi topo -m; nvidia-smi nvlink -s | head -40
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
  lscpu | grep -E "Model name|^CPU\(s\)"
} >"$OUT/machine.txt" 2>&1
comm "$GPUS" 150
for case in $TRAIN_CASES; do train "$case" 100; done
for gpus in $FIT_GPUS; do comm "$gpus" 90; done
echo "## done (t=$(( $(date +%s) - start ))s)" >>"$LOG"
