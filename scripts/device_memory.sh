#!/usr/bin/env bash
# Measure the memory calculator against torch.cuda.max_memory_allocated on a CUDA GPU.
#   bash scripts/device_memory.sh [OUT_DIR]      (default: $OUT, else reports/memory)
# Writes OUT_DIR/memory_rows.jsonl (one row per case, appended as measured; a rerun resumes)
# and OUT_DIR/validation.md. Needs torch with CUDA; run from the repository root.
set -euo pipefail
OUT_DIR="${1:-${OUT:-reports/memory}}"
export MLSYS_COMMIT="${MLSYS_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
export PYTHONPATH="${PYTHONPATH:-}:$(pwd)" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -m mlsyscalc.bench.cases.memory --out "$OUT_DIR"
