#!/usr/bin/env bash
# One H200 (device kind nvidia-h200), torch 2.11.0+cu130, code of bd1f7e4, 65 s: bf16 GEMMs (8192 x 8192 x 4096) and
# 1 GiB copies back to back in six fixed ratios, 8 s each, the clock and each kernel's time read beside calc.roofline.steady's
# prediction for the mix (scripts/sustained_mix_probe.py).
exec python3 scripts/sustained_mix_probe.py --out rows.jsonl --seconds 8
