#!/usr/bin/env bash
# One H200 (device kind nvidia-h200), torch 2.11.0+cu130, triton 3.6.0, driver 580.159.04, code of bd4fa77: the fused
# kernels' GPU tests, then every op and pass of the train sweep, our kernels timed as CUDA-graph replays (torch's
# baselines eagerly), 184 s.
#   MLSYS_GIT_COMMIT=bd4fa77 BUDGET_S=400 OUT=$OUT bash scripts/device.sh fused
# then, here: copy $OUT/fused/rows.jsonl and tests.txt (as gpu_tests.txt) into this folder and
#   mlsys bench report reports --out reports
exec bash scripts/device.sh fused
