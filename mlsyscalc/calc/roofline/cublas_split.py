"""When cuBLAS splits a GEMM's K and launches a reduction (`splitKreduce_kernel`): the rule the
decode profiles of reports/models show. Shared by the roofline's kernel lists (calc.roofline.torch_kernels,
which adds the reductions) and the GEMM price (calc.roofline.ops, which counts a split GEMM's CTAs)."""

from __future__ import annotations

import math
from typing import Any, Protocol


class SplitGemm(Protocol):
    """What the rule reads of a GEMM's prediction (calc.roofline.ops.OpPrediction)."""

    @property
    def tiling(self) -> Any: ...  # the roofline's Tiling (its split), or None

    @property
    def dims(self) -> tuple[float, ...]: ...  # (tokens, groups, N, K)


SPLIT_MIN_K = 2048  # cuBLAS splits K only this long or longer (gpt2's K = 768 GEMMs were not split)
SPLIT_LONG_K_MAX_ROWS = 128  # the long-reduction split (K >= 2 N) only below this many rows (cublas_splits)
# A few-tile GEMM (fewer than SMs / 2 output tiles) is split only with K this long, by rows per
# group: (at most this many rows, shortest K split). H100 decode profiles of the fit-set models
# (torch 2.11, cuBLAS 13; reports/models/h100*.jsonl): up to 8 rows llama2-7b's 4096 x 4096
# projections split, qwen2.5-7b's 3584 x 3584 (B1, B4) and pythia-1.4b's 2048 x 2048 (B8) do not;
# from 9 rows qwen2.5-7b's 3584 x 3584 split (B16), pythia-1.4b's 2048 x 2048 do not (B32).
SPLIT_FEW_TILES_MIN_K = ((8, 4096), (math.inf, 3584))


def few_tiles_min_k(rows: int) -> float:
    """The shortest K cuBLAS splits in a few-tile GEMM of `rows` rows (SPLIT_FEW_TILES_MIN_K)."""
    return next(k for most, k in SPLIT_FEW_TILES_MIN_K if rows <= most)


def cublas_splits(pred: SplitGemm, sms: int) -> bool:
    """Whether cuBLAS (12.9-13, Hopper) splits K and launches a reduction: observed in the decode
    profiles of reports/models when the roofline's tiling splits, K >= SPLIT_MIN_K, and either the
    output has fewer than SMs / 2 tiles of 64 columns x 16 rows and K is at least
    few_tiles_min_k(rows), or K >= 2 N (a long reduction):
    llama2-7b B1/B16 split q/k/v/o (N = K = 4096: 64 tiles) and down_proj (K = 11008), not
    gate/up (N = 11008: 172 tiles) nor the lm_head; at B32 and B64 (128 tiles of 16 rows) only
    down_proj; gpt2 only its c_proj; qwen2.5-7b at B1/B4 only k/v (N = 512: K >= 2 N) and
    down_proj, its 3584 x 3584 q/o at B16 too, not at B32 (112 tiles).
    The long-reduction rule (K >= 2 N) holds for skinny GEMMs only (fewer than SPLIT_LONG_K_MAX_ROWS
    rows): with 128 or more rows cuBLAS runs one balanced nvjet kernel and no reduction (prefill and
    training profiles, H100: phi-2 B1 S1024's down_proj, 1024 x 2560 x 10240, 32 GEMM kernels at
    72.6 us and no splitKreduce; gpt2's 2048 x 768 x 3072 c_proj: 73 GEMM kernels for 12 layers x 6
    + 1, none a reduction). The tiling's split still prices the GEMM's balanced time."""
    tiling = pred.tiling
    if tiling is None or tiling.split <= 1:
        return False
    tokens, groups, n, k = pred.dims
    rows = math.ceil(tokens / groups)
    few_tiles = math.ceil(n / 64) * math.ceil(rows / 16) < sms / 2 and k >= few_tiles_min_k(rows)
    return k >= SPLIT_MIN_K and (few_tiles or (k >= 2 * n and rows < SPLIT_LONG_K_MAX_ROWS))
