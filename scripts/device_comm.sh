#!/usr/bin/env bash
# The NCCL sweep behind reports/comm/ (`scripts/device.sh comm` runs it with OUT=<out>/comm; see docs/comm.md).
# Rows land in $OUT/rows.jsonl; then, on any machine: mlsys bench report <fetched out> --out reports, and
#   mlsys bench comm --from --out reports/comm/rows.jsonl --calibrate model_specs/clusters/<name>.json --name <name>
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): on shared hosts it can take the GPUs out of service.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# model_specs/ ships inside the package namespace, so install (editable) rather than PYTHONPATH=.
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1 || echo "pip install -e . failed"
NAME="${NAME:-$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[-1].lower())')-x$(nvidia-smi -L | wc -l)-measured}"
OUT="${OUT:-comm_out}"
mkdir -p "$OUT"
{
  nvidia-smi
  nvidia-smi topo -m
  nvidia-smi nvlink -s
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} > "$OUT/machine.txt" 2>&1
timeout "${SWEEP_TIMEOUT:-240}" python3 -m mlsyscalc bench comm --min-size 8KiB --max-size "${MAX_SIZE:-2GiB}" --backend "${BACKEND:-nccl}" \
  --out "$OUT/rows.jsonl" --fit-min-size "${FIT_MIN:-1MiB}" --calibrate "$OUT/$NAME.json" --name "$NAME" \
  --report "$OUT/report" --format markdown > "$OUT/comm_log.txt" 2>&1
echo "bench comm exit $?"
tail -n 60 "$OUT/comm_log.txt"
