#!/usr/bin/env bash
# One H200 (device kind nvidia-h200), torch 2.11.0+cu130, triton 3.6.0: the training step's ops beside the layers
# (fp32 cross-entropy, embedding backward, gradient clipping, fused AdamW, dropout + add), do_bench medians with the
# bytes each must move, and a llama3-8b training step (8 of its layers, S8192) run back to back for STEADY_S seconds.
#   MLSYS_GIT_COMMIT=<sha> OUT=$OUT bash scripts/device.sh sustained
# wrote $OUT/sustained/train_ops.jsonl, whose rows are copied here (calc.roofline.head and docs/train.md cite them).
exec python3 scripts/train_ops_measure.py --out rows.jsonl --steady "${STEADY_S:-25}" --model llama3-8b --layers 8 --seq 8192
