"""SDPA's memory-efficient (CUTLASS) attention kernel, for head dims the flash and cuDNN backends refuse.

PyTorch's SDPA (torch 2.x, CUDA; aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) tries cuDNN,
flash, then memory-efficient attention. Flash needs Q, K and V of one head dim <= 256
(check_head_dim_size_flash); cuDNN needs both head dims <= 128, or <= 256 on sm90 with cuDNN 9.10+
(check_cudnn_tensor_shapes); the memory-efficient kernel takes any head dim divisible by 8
(check_head_dim_size_mem_efficient). So absorbed MLA decode (DeepSeek-V2 section 2.1.2: the query
heads attend over the cached latent, Q/K width kv_lora_rank + qk_rope_head_dim = 576, V width 512)
runs the memory-efficient kernel: the profiles of `mlsys bench model deepseek-v3 --phase decode` show
`fmha_cutlassF_bf16_aligned_32x128_gmem_sm80`, 4 calls in 4 layers.

That kernel (kernel_forward.h of PyTorch's mem_eff_attention, head dims above 128) gives each CTA
32 query rows and walks all keys 128 at a time; with a V wider than 128 the output stays in an fp32
global-memory accumulator between key blocks (`gmem`, kKeepOutputInRF false). The grid is
ceil(queries / 32) x heads x batch, with no split of the keys. In the absorbed form SDPA sees one head
of H query rows (q (B, 1, H, 576)), so a decode step runs B x ceil(H / 32) CTAs: 4 for deepseek-v3 at
B1, 64 at B16, each on an SM of its own, and the kernel lasts one CTA's walk over the cache whatever
B is (H100 and H200 profiles: 201-208 us a call at B1 and B16, ctx 2048; HBM bandwidth does not
matter, the two cards' SMs run at the same clock).

Its time: the busiest SM's CTAs, max(one CTA alone at ONE_CTA_SM_FRACTION, its CTAs together at
FULL_SM_FRACTION) of the SM's share of the datasheet peak; a CTA's FLOPs are 32 rows x the keys
padded to 128 x 2 (d_qk + d_v).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...dtypes import bytes_per_element, dtype_name
from ..counts.attention import AttentionShape, attention_bytes, attention_flops
from .calibration import Ceilings
from .ops import OpPrediction, Tiling, _finish

FLASH_MAX_HEAD_DIM = 256  # check_head_dim_size_flash (and equal Q/K/V widths)
CUDNN_MAX_HEAD_DIM = 256  # check_cudnn_tensor_shapes on sm90, cuDNN >= 9.10 (128 elsewhere)
BLOCK_M = 32  # query rows per CTA of the kernels for head dims above 128 (..._32x128_gmem_sm80)
BLOCK_N = 128  # keys per step
# One CTA alone on an SM: its FLOPs at this fraction of the SM's share of the datasheet bf16 peak
# (989.5 TFLOP/s / 132 SMs = 7.50 TFLOP/s). H200, torch 2.11, deepseek-v3 (4 layers) decode B1 ctx2048
# under CUDA graphs (reports/models/h200_moe.jsonl): 816.1 us in 4 calls, 204.0 us each, 2 us fixed
# cost out 202.0 us, for one CTA's 32 x 2176 x 2 x (576 + 512) = 151.5 MFLOP: 0.750 TFLOP/s, 0.100.
# The H100 rows (201.0 us a call) are the check: the rate follows the SM, not the HBM.
ONE_CTA_SM_FRACTION = 0.100
# An SM kept full of these CTAs: H200, torch 2.11, SDPA EFFICIENT_ATTENTION bf16 forward, B4 H32
# S4096 d256 (the same 32x128_gmem kernel), 16384 CTAs in 14.81 ms for 2.199 TFLOP
# (reports/attention/rows.jsonl): 148.5 TFLOP/s, 1.125 TFLOP/s an SM, 0.150.
FULL_SM_FRACTION = 0.150
COMPUTE_CLASS = "attention_mem_efficient"  # not an Efficiency field: the two fractions above price it


def runs_mem_efficient(d_qk: int, d_v: int) -> bool:
    """Whether SDPA on Hopper falls through to the memory-efficient kernel: a head dim above both
    the flash and the cuDNN limits."""
    return max(d_qk, d_v) > max(FLASH_MAX_HEAD_DIM, CUDNN_MAX_HEAD_DIM)


def mem_efficient_grid(batch: int, heads: int, rows: int) -> int:
    """CTAs: ceil(query rows / BLOCK_M) per head and sequence (no split of the keys)."""
    return batch * heads * math.ceil(rows / BLOCK_M)


def mem_efficient_attention(batch: int, rows: int, seq_kv: int, d_qk: int, d_v: int, dtype: str, ceil: Ceilings,
                            kv_dtype: str | None = None, v_in_k: bool = True,
                            name: str = "attention") -> OpPrediction:
    """One forward call of SDPA's memory-efficient kernel over `batch` single-head problems of `rows`
    query rows each (absorbed MLA decode: the query heads are the rows) and `seq_kv` keys. FLOPs and
    bytes as calc.counts.attention counts them (V a slice of the cached K when v_in_k); the time is the
    busiest SM's CTAs (module docstring)."""
    act = dtype_name(dtype)
    kv = dtype_name(kv_dtype or act)
    shape_ = AttentionShape(batch, rows, 1, 1, seq_kv, d_qk, d_v, False)
    flops = attention_flops(shape_)
    read, write = attention_bytes(shape_, bytes_per_element(act), bytes_per_element(kv), v_in_k=v_in_k)
    units = mem_efficient_grid(batch, 1, rows)
    sms = ceil.sm_count
    per_sm = ceil.datasheet_flops(act) / sms
    cta = BLOCK_M * math.ceil(seq_kv / BLOCK_N) * BLOCK_N * 2.0 * (d_qk + d_v)
    load = math.ceil(units / sms)  # CTAs on the busiest SM
    compute_s = max(cta / (per_sm * ONE_CTA_SM_FRACTION), load * cta / (per_sm * FULL_SM_FRACTION))
    tiling = Tiling(BLOCK_M, BLOCK_N, 1, units, load, sms)
    shape = f"B{batch} {rows} rows x {seq_kv} keys d{d_qk}/{d_v} mem-efficient"
    pred = _finish(name, "attention", act, flops, read, write, compute_s, ceil, tiling, shape, act)
    return replace(pred, compute_class=COMPUTE_CLASS)  # its own rate: calibration's attention fit leaves it
