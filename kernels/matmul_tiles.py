"""The pieces the persistent matmul (matmul.py) and the split-K matmul (matmul_splitk.py) share.

- `_tile_coords`: grouped tile order (GROUP_M row-tiles share one column of B while it sits in L2).
- `_load_ab`: masked pointer loads of one A and one B tile.
- `_epilogue`: scales (per-tensor, or per-row of A x per-column of B), bias, activation, in fp32.
- `_block_shapes`: TMA block shapes for one config; `_SMALL_TILE`: the CPU interpreter's tile.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # Grouped ordering (Triton matmul tutorial): walk GROUP_M row-tiles down one column of tiles.
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _load_ab(a_ptr, b_ptr, offs_m, offs_n, k, M, N, K, stride_am, stride_ak, stride_bk, stride_bn):
    # Masked pointer loads of one A (BLOCK_M, BLOCK_K) and one B (BLOCK_K, BLOCK_N) tile; zeros outside.
    a = tl.load(a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
                mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
    b = tl.load(b_ptr + k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
    return a, b


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr,
              SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    if SCALE == 1:  # per-tensor: one fp32 scale each for A and B
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr))
    if SCALE == 2:  # per-row of A (M,) times per-column of B (N,)
        sa = tl.load(a_scale_ptr + offs_m, mask=offs_m < M, other=0.0)
        sb = tl.load(b_scale_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc * sa[:, None] * sb[None, :]
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    if ACT == 2:  # tanh-approximate GELU, tanh(u) = 2 sigmoid(2u) - 1
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    if ACT == 3:
        acc = acc * tl.sigmoid(acc)
    return acc


def _block_shapes(cfg) -> tuple[list, list, list]:
    """TMA block shapes of A (or A^T), B (or W = B^T) and C for one config (BLOCK_*, A_T, B_NK, SUBTILE)."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    return ([bk, bm] if cfg["A_T"] else [bm, bk], [bn, bk] if cfg["B_NK"] else [bk, bn],
            [bm, bn // 2 if cfg.get("SUBTILE") else bn])


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


_SMALL_TILE = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2)   # the CPU interpreter's fixed config
