"""Attention over a paged KV cache, as serving engines run it (`RooflineOptions.kv_layout` "paged").

A serving engine keeps K and V in fixed-size pages read through a block table (vLLM's PagedAttention,
Kwon et al., SOSP 2023; kernels/attention_decode.py is ours) and runs attention on kernels built for
it. Three things differ from the contiguous flash kernel `calc.roofline.ops.predict_attention` prices:

- Decode splits the KV sequence by FlashAttention-2's rule (flash-decoding): `num_splits_heuristic`
  of Dao-AILab/flash-attention csrc/flash_attn/flash_api.cpp (at 765fbd9): one split once the
  (batch x heads x 64-row query blocks) CTAs fill 80% of the SMs, else the fewest splits of the KV
  blocks (128 keys for head dims up to 160) whose SM-wave efficiency is within 85% of the best, at
  most 64 (an engine may cap them: `max_splits`; 1 is an engine that never splits the KV sequence,
  TensorRT-LLM 0.9's decode kernels without multi-block mode). Query heads that share a KV head are
  packed into the rows of one CTA (FlashAttention's GQA decode path, as our kernel does), so the CTAs
  are batch x KV heads x splits. Each CTA streams at most DECODE_CTA_STREAM_BPS of its architecture
  (below), and a split run adds the combine kernel (one more fixed cost and stream gap). With the
  split rule the cap seldom binds; unsplit, a pass of few sequences is priced by it: at one sequence
  its time grows with the context however the heads are spread over TP GPUs (docs/serve.md,
  "Unsplit decode attention").
- Prefill attention (a chunk whose keys live in pages, the cached ones included) computes at
  PAGED_PREFILL_RATIO of the contiguous kernel's rate, by architecture (below).
- FLOPs and bytes are the contiguous kernel's (the block table itself is 4 bytes a page a sequence).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from .calibration import Ceilings
from .ops import CTA_STREAM_BPS, OpPrediction, Tiling

SPLIT_BLOCK_N = 128  # keys per KV block of FlashAttention-2's split-KV kernel, head dim <= 160 (flash_api.cpp)
SPLIT_BLOCK_M = 64  # query rows per CTA of that kernel (kBlockM of the split-KV kernels)
MAX_SPLITS = 64  # flash_api.cpp mha_fwd: num_splits_heuristic(..., 64)
DECODE_QUERIES = 16  # a pass with at most this many query tokens a sequence runs the decode kernel
# Paged prefill attention's compute rate as a share of the contiguous flash kernel's, by GPU architecture.
# Ampere: public serving-simulator profiles (microsoft/vidur data/profiling/a100/attention.csv at e2d00e9,
# Llama-2/3-70B TP 2 on an A100, Sarathi-Serve's FlashAttention-2 paged backend, kineto medians): the
# roofline's time over the measured one for every prefill row of 512-4096 new tokens after 0-4032 cached
# ones (3,093 rows), median 0.45 (0.46 with cached keys, 0.30 without; 0.39 at 2048+ new tokens).
# Hopper: 1.0 -- no measured paged profile; FlashAttention-3 and TensorRT-LLM's paged context kernels are
# their cards' flash kernels, and NIM's H100 rows (reports/serving/published_nim.json, in-sample) rule out
# the Ampere share: with it a 20,000-token Llama-3-8B prompt would take 1.65x the measured 403 ms.
PAGED_PREFILL_RATIO = {"Ampere": 0.45}
# Bytes/s one decode-attention CTA streams at most, by architecture. Hopper: the rate one cuBLAS GEMM CTA
# streams (calc.roofline.ops.CTA_STREAM_BPS, measured on an H100). Ampere: that rate scaled by the SM boost
# clock, 1410 / 1980 MHz (A100 / H100 SXM datasheets): a lone CTA's stream is bound by its own issue and
# latency, not the HBM. Not fitted; checked after the fact on NVIDIA DLI's TensorRT-LLM runs (in-sample):
# the one-client ITL grows 8.0-8.4 us per layer per 1,000 keys of 16-bit KV on H100s (61-64 GB/s a CTA)
# and 12.0-12.2 us on A100s (42-43 GB/s; 15.7 us, 33 GB/s, at TP 8), at TP 1 to 8 alike.
DECODE_CTA_STREAM_BPS = {"Hopper": CTA_STREAM_BPS["Hopper"], "Ampere": CTA_STREAM_BPS["Hopper"] * 1410 / 1980}


@lru_cache(maxsize=65536)
def decode_splits(ctas: int, sms: int, kv_blocks: int, max_splits: int = MAX_SPLITS) -> int:
    """FlashAttention-2's num_splits_heuristic: ctas = batch x heads x query blocks before splitting."""
    if ctas >= 0.8 * sms:
        return 1
    most = min(max_splits, sms, kv_blocks)
    eligible = [s for s in range(1, most + 1) if s == 1 or -(-kv_blocks // s) != -(-kv_blocks // (s - 1))]
    eff = {s: (ctas * s / sms) / math.ceil(ctas * s / sms) for s in eligible}
    best = max(eff.values(), default=1.0)
    return next((s for s in eligible if eff[s] >= 0.85 * best), 1)


def decode_ctas(batch: int, kv_heads: int, rows_per_kv_head: int) -> int:
    """CTAs of one split: batch x KV heads x 64-row blocks of the packed query rows."""
    return batch * kv_heads * math.ceil(rows_per_kv_head / SPLIT_BLOCK_M)


def decode_stream(ceil: Ceilings, batch: int, kv_heads: int, rows_per_kv_head: int, seq_kv: float,
                  max_splits: int = MAX_SPLITS) -> tuple[int, float]:
    """(splits, bytes/s the CTAs stream at most: inf without a per-CTA rate) of a paged decode pass;
    max_splits: the engine's cap on the KV splits (1: it never splits)."""
    ctas = decode_ctas(batch, kv_heads, rows_per_kv_head)
    splits = decode_splits(ctas, ceil.sm_count, max(1, math.ceil(seq_kv / SPLIT_BLOCK_N)), min(max_splits, MAX_SPLITS))
    rate = DECODE_CTA_STREAM_BPS.get(ceil.gpu.architecture)
    return splits, math.inf if rate is None else min(ctas * splits, ceil.sm_count) * rate


def combine_s(ceil: Ceilings, splits: int) -> float:
    """The split run's second kernel (rescale and sum the partial outputs): its fixed cost and gap."""
    return ceil.overhead_s("memory") + ceil.gap_s if splits > 1 else 0.0


def paged_attention(pred: OpPrediction, ceil: Ceilings, batch: int, kv_heads: int, seq_q: int, seq_kv: int,
                    group: int) -> OpPrediction:
    """`pred` (a contiguous flash kernel's) as the paged kernel a serving engine runs it."""
    if seq_q > DECODE_QUERIES:
        ratio = PAGED_PREFILL_RATIO.get(ceil.gpu.architecture, 1.0)
        return replace(pred, compute_s=pred.compute_s / ratio, name=pred.name + " (paged)")
    splits, cap_Bps = decode_stream(ceil, batch, kv_heads, group * seq_q, seq_kv)
    ctas = decode_ctas(batch, kv_heads, group * seq_q) * splits
    tiling = Tiling(SPLIT_BLOCK_M, SPLIT_BLOCK_N, splits, ctas, math.ceil(ctas / ceil.sm_count), ceil.sm_count)
    return replace(pred, memory_s=max(pred.memory_s, pred.bytes / cap_Bps), overhead_s=pred.overhead_s + combine_s(ceil, splits),
                   tiling=tiling, name=pred.name + " (paged)")
