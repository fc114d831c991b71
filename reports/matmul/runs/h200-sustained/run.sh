#!/usr/bin/env bash
# One H200 (device kind nvidia-h200), torch 2.11.0+cu130, triton 3.6.0, driver 580.159.04, code of fb21aea:
# every ceiling back to back for 20 s after its burst (do_bench) figure, NVML sampled on a thread beside it.
#   MLSYS_GIT_COMMIT=fb21aea OUT=$OUT bash scripts/device.sh sustained
# wrote $OUT/sustained/ceilings.json, copied here; calc.roofline.steady reads its figures (docs/roofline.md, "Sustained clocks").
exec python3 -m mlsyscalc bench ceilings --sustained --seconds 20 --out ceilings.json
