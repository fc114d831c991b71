#!/usr/bin/env bash
# Collectives fitted on 2 GPUs, checked on 4 GPUs of the same host (the same links), then the TP x PP 2 x 2
# training step; one call on a 4-GPU host, each part under its own timeout, everything tarred into one file.
#   OUT=<dir> scripts/device_comm_transfer.sh     -> $OUT/comm_transfer.tar.gz, $OUT/log.txt
# CPU smoke test of the same path: BACKEND=gloo MAX_SIZE=64KiB TRAIN_EXTRA="--device cpu --tiny --seq 64" OUT=/tmp/x ...
# GRAPH=1 adds --graph (CUDA-graph replay beside the eager calls); TRAIN=0 skips the training step.
# Inside the tar: rows.jsonl (bench comm rows, 2 and 4 GPUs), fit-2gpu.json (the 2-GPU calibration),
# report/ (README.md and transfer.md: the 2-GPU fit on the 4-GPU rows), transfer_models.md
# (scripts/validate/comm_transfer.py), shared_fit.md (scripts/validate/comm_shared.py), train_rows.jsonl
# (scripts/train_measure.py --case tp-pp), machine.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
D="$OUT/comm_transfer"
mkdir -p "$D"
LOG="$OUT/log.txt"
BUDGET_S=${BUDGET_S:-400}   # start nothing new after this many seconds
step() {  # TIMEOUT_S COMMAND...
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "## skipped (time): ${*:2}" | tee -a "$LOG"; return; fi
  echo "## ${*:2}  (t=${SECONDS}s)" | tee -a "$LOG"
  timeout "$1" "${@:2}" 2>&1 | tail -n 40 | tee -a "$LOG"
}
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi nvlink -s | head -40
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
} > "$D/machine.txt" 2>&1
GPU=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[-1].lower())' 2>/dev/null || echo gpu)
SWEEP=(--min-size 8KiB --max-size "${MAX_SIZE:-1GiB}" --out "$D/rows.jsonl" --backend "${BACKEND:-nccl}")
RUN=("${SWEEP[@]}"); [ "${GRAPH:-0}" = 1 ] && RUN+=(--graph)
# (a) two GPUs of the host, (b) all four: rows of both GPU counts in one file, tagged by "gpus"
CUDA_VISIBLE_DEVICES=0,1 step "${SWEEP_TIMEOUT_S:-130}" python3 -m mlsyscalc bench comm --nproc 2 "${RUN[@]}" --format markdown
step "${SWEEP_TIMEOUT_S:-130}" python3 -m mlsyscalc bench comm --nproc 4 "${RUN[@]}" --format markdown
# the 2-GPU fit, checked on the 4-GPU rows (report/transfer.md), and the link/buffer model comparison
step 60 python3 -m mlsyscalc bench comm --from "${SWEEP[@]}" --fit-gpus 2 --fit-min-size "${FIT_MIN:-1MiB}" --node-gpus 4 \
  --calibrate "$D/fit-2gpu.json" --name "$GPU-x2-same-host" --report "$D/report" --format markdown
step 60 python3 scripts/validate/comm_transfer.py --rows "$D/rows.jsonl" --out "$D/transfer_models.md"
step 60 python3 scripts/validate/comm_shared.py --rows "$D/rows.jsonl" --out "$D/shared_fit.md"
# (c) TP x PP 2 x 2 (DTensor TP inside each stage, 1F1B across the stages): step time and peak memory per rank
[ "${TRAIN:-1}" = 1 ] && step 170 torchrun --standalone --nproc_per_node 4 scripts/train_measure.py --case tp-pp --out "$D" --steps 8 ${TRAIN_EXTRA:-}
echo "## done (t=${SECONDS}s)" | tee -a "$LOG"
cp "$LOG" "$D/" && tar -czf "$OUT/comm_transfer.tar.gz" -C "$OUT" comm_transfer && rm -rf "$D"
