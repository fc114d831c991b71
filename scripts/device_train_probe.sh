#!/usr/bin/env bash
# Host-probed training steps on 2 (or 4) GPUs of one host, and GPU-bound controls: scripts/train_measure.py with
# its host probe (each case's process times a tiny model in the case's layout first; the row's host_probe), one
# case a process, each under a timeout.
#   scripts/device_train_probe.sh DIR        2 GPUs: tp, fsdp, ddp, single (2 sequences of 2048 a GPU), then the
#                                            controls fsdp (8 a GPU) and tp (8 a GPU, 6 where a GPU has < 100 GB),
#                                            then pp-1f1b if time is left
#   scripts/device_train_probe.sh DIR 4      4 GPUs: tp, fsdp, fsdp-tp, tp-pp, ddp, single, then the controls
#                                            fsdp (8 a GPU), tp (8 a GPU, 5 under 100 GB)
#   scripts/device_train_probe.sh DIR N zero2  N GPUs: fsdp and fsdp-zero2 (FSDP2 as ZeRO-3 and ZeRO-2) in turns,
#                                            2 then 8 sequences a GPU
# The host-bound cases (tp, fsdp, fsdp-tp) probe again after the case (host_probe_after: how far the host moved).
# rows -> DIR/train_rows.jsonl (a control is the row whose global_batch / gpus is above 2); log -> DIR/log.txt.
# BUDGET_S (default 200): start nothing after it. EXTRA: more train_measure flags (a CPU dry run:
# EXTRA="--device cpu --tiny --seq 32 --probe-seq 16 --probe-steps 1"). Score:
#   python scripts/validate/train_compare.py DIR/train_rows.jsonl --cluster hgx-h200 --calibration CEIL --host-probe
set -u
DIR=${1:?usage: scripts/device_train_probe.sh DIR [GPUS 2|4] [zero2]}
GPUS=${2:-2}
mkdir -p "$DIR"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
BUDGET_S=${BUDGET_S:-200}
LOG="$DIR/log.txt"
. "$(dirname "$0")/device_train_lib.sh"  # step
measure() {  # NPROC CASE SEQS_PER_GPU [MORE FLAGS]
  step 85 python3 -m torch.distributed.run --standalone --nproc_per_node "$1" scripts/train_measure.py --case "$2" --seqs-per-gpu "$3" \
    --out "$DIR" --warmup 2 --steps 6 --host-probe "${@:4}" ${EXTRA:-}
}
{ nvidia-smi -L; nvidia-smi topo -m; lscpu | grep -E "Model name|^CPU\(s\)"
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; } >>"$LOG" 2>&1
MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
# TP's control: 8 sequences a GPU need 84 GiB on 2 GPUs, 95 on 4 (mlsys train --framework torch); under 100 GB a GPU,
# 6 (67 GiB) on 2 and 5 (63 GiB) on 4, where the priced GPU path is only 9-16% above the host's (418 / 444 ms
# against 384 with the built-in costs): a weaker control.
BIG=$([ "$GPUS" = 2 ] && echo 6 || echo 5); [ "${MIB:-0}" -gt 100000 ] && BIG=8
if [ "${3:-}" = zero2 ]; then  # FSDP2 with and without resharding after the forward (ZeRO-3, ZeRO-2), in turns
  for seqs in 2 8; do for c in fsdp fsdp-zero2; do measure "$GPUS" $c $seqs --probe-after; done; done
elif [ "$GPUS" = 2 ]; then
  for c in tp fsdp; do measure 2 $c 2 --probe-after; done
  measure 2 ddp 2
  measure 1 single 2
  measure 2 fsdp 8
  measure 2 tp "$BIG"
  measure 2 pp-1f1b 2
else
  for c in tp fsdp fsdp-tp; do measure 4 $c 2 --probe-after; done
  for c in tp-pp ddp; do measure 4 $c 2; done
  measure 1 single 2
  measure 4 fsdp 8
  measure 4 tp "$BIG"
fi
echo "## done (t=${SECONDS}s)" >>"$LOG"
