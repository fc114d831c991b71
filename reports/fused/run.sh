#!/usr/bin/env bash
# One H200 (device kind nvidia-h200), torch 2.11.0+cu130, triton 3.6.0, driver 580.159.04, code of bd4fa77: the fused
# kernels' GPU tests, then every op and pass of the train sweep, our kernels timed as CUDA-graph replays (torch's
# baselines eagerly), 184 s.
#   MLSYS_GIT_COMMIT=bd4fa77 BUDGET_S=400 OUT=$OUT bash scripts/device.sh fused
# then, here: copy $OUT/fused/rows.jsonl and tests.txt (as gpu_tests.txt) into this folder and
#   mlsys bench report reports --out reports
# The backwards of RMSNorm, LayerNorm (commit 6c3e10a) and dropout_add (41b1173) were measured again after their
# tile and grid changes, same machine type, torch 2.11.0+cu130, triton 3.6.0: the fused GPU tests (7 passed at
# each commit), then
#   MLSYS_GIT_COMMIT=6c3e10a python3 -m mlsyscalc bench fused --op rmsnorm --op layernorm --op dropout_add --pass bwd \
#       --quiet --format csv --out $OUT/fused/rows.jsonl      (55 s)
#   MLSYS_GIT_COMMIT=41b1173 python3 -m mlsyscalc bench fused --op dropout_add --pass bwd ...   (27 s)
#   MLSYS_GIT_COMMIT=bdf9f47 python3 -m mlsyscalc bench fused --op dropout_add --pass bwd ...   (25 s)
# and their rows appended here (the last row of each key counts). The norms and dropout_add again after the kernel
# changes of de628d9 (partial sums, pipelined backward loop, wide LayerNorm in chunks), same machine type, torch
# 2.11.0+cu130, triton 3.6.0, driver 580.159.04 (8 fused GPU tests passed: gpu_tests.txt), both passes:
#   MLSYS_GIT_COMMIT=de628d9 python3 -m mlsyscalc bench fused --op rmsnorm --op layernorm --op dropout_add \
#       --quiet --format csv --out $OUT/fused/rows.jsonl      (110 s)
# LayerNorm's backward again after 05befe7 (wide rows: dx, then dw and db by columns), same machine type and
# versions (8 fused GPU tests passed: gpu_tests.txt):
#   MLSYS_GIT_COMMIT=05befe7 python3 -m mlsyscalc bench fused --op layernorm --pass bwd --quiet --format csv \
#       --out $OUT/fused/rows.jsonl      (26 s)
# The heldout sweep (heldout/README.md):
#   MLSYS_GIT_COMMIT=0afd6d7 python3 -m mlsyscalc bench fused --sweep heldout --quiet --format csv --out ...  (102 s)
# LayerNorm's forward of rows wider than 8192 again after fe3d46a (its chunked kernel reads the row twice), same
# machine type and versions (8 fused GPU tests passed), the last of three LayerNorm-forward runs of one call
# (experiments/data/ab_layernorm_stats.jsonl); the 16384-wide rows appended here:
#   MLSYS_GIT_COMMIT=fe3d46a python3 -m mlsyscalc bench fused --op layernorm --pass fwd --sweep train --quiet \
#       --format csv --out $OUT/ln_new2.jsonl      (19 s)
# The fresh sweep in the same call (heldout/README.md):
#   MLSYS_GIT_COMMIT=fe3d46a python3 -m mlsyscalc bench fused --sweep fresh --quiet --format csv --out ...  (124 s)
# RMSNorm and LayerNorm again after 2db1f4c (LayerNorm's forward warps, RMSNorm's backward tile), same machine type
# and versions (8 fused GPU tests passed), both passes, appended here; the blind sweep in the same call:
#   MLSYS_GIT_COMMIT=2db1f4c python3 -m mlsyscalc bench fused --op rmsnorm --op layernorm --sweep train --quiet \
#       --format csv --out $OUT/norms_new.jsonl      (63 s)
#   MLSYS_GIT_COMMIT=2db1f4c python3 -m mlsyscalc bench fused --sweep blind ...      (112 s; run as --sweep fresh2)
exec bash scripts/device.sh fused
