#!/usr/bin/env bash
# Measured training steps on 2 or 4 GPUs of one host (scripts/train_measure.py, one case a process, each under
# a timeout) and the FSDP rows of `mlsys bench model`.
#   scripts/device_train.sh DIR                 rows -> DIR/train_rows.jsonl, DIR/bench_model_fsdp.jsonl; log -> DIR/log.txt
#   scripts/device_train.sh DIR profile         the cases again with two profiled steps each: GPU time by kernel class
#                                               and host time per op (scripts/trace_summary.py) per rank in the rows;
#                                               with KEEP_TRACES=1 also rank 0's Chrome traces in DIR/traces_rank0.tar
#   scripts/device_train.sh DIR profile 2       the 2-GPU cases (tp, fsdp, pp-interleaved, ddp, pp-1f1b, single),
#                                               profiled; BUDGET_S bounds the wall time (start nothing after it)
set -u
DIR=${1:?usage: scripts/device_train.sh DIR [measure|profile] [GPUS 4|2]}
MODE=${2:-measure}
GPUS=${3:-4}
mkdir -p "$DIR"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
BUDGET_S=${BUDGET_S:-420}   # start nothing new after this many seconds
LOG="$DIR/log.txt"
. "$(dirname "$0")/device_train_lib.sh"  # step
EXTRA=(--steps 8)
[ "$MODE" = profile ] && mkdir -p "$DIR/traces" && EXTRA=(--warmup 2 --steps 4 --profile "$DIR/traces")
measure() {  # NPROC CASE
  step 110 torchrun --standalone --nproc_per_node "$1" scripts/train_measure.py --case "$2" --out "$DIR" "${EXTRA[@]}"
}
{ nvidia-smi -L; nvidia-smi topo -m; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; } >>"$LOG" 2>&1
if [ "$GPUS" = 2 ]; then
  for c in tp fsdp pp-interleaved ddp pp-1f1b; do measure 2 $c; done
  measure 1 single
  rm -rf "$DIR/traces"
  echo "## done (t=${SECONDS}s)" >>"$LOG"
  exit 0
fi
if [ "$MODE" = profile ]; then
  for c in pp-1f1b pp-gpipe pp-interleaved tp ddp fsdp fsdp-tp; do measure 4 $c; done
  measure 1 single
  [ "${KEEP_TRACES:-0}" = 1 ] && (cd "$DIR/traces" && tar -cf ../traces_rank0.tar ./*rank0.json.gz ./*pp-1f1b_rank3.json.gz) >>"$LOG" 2>&1
  rm -rf "$DIR/traces"
  echo "## done (t=${SECONDS}s)" >>"$LOG"
  exit 0
fi
measure 4 fsdp
measure 1 single
measure 4 ddp
measure 4 tp
measure 4 pp-1f1b
measure 4 pp-gpipe
measure 4 pp-interleaved
measure 4 fsdp-tp
measure 4 tp-pp
step 120 torchrun --standalone --nproc-per-node 2 -m mlsyscalc bench model llama3-8b --phase train --batch 1 --seq 2048 \
  --fsdp --layers 8 --quiet --out "$DIR/bench_model_fsdp.jsonl" --format markdown
echo "## done (t=${SECONDS}s)" >>"$LOG"
