"""Roofline time of one kernel: matmul, flash-style attention and memory-bound ops.

Every prediction is

    predicted_s = max(compute_s, memory_s, floor_s) + overhead_s
    compute_s   = waves x (FLOPs of one padded tile) / (achievable FLOP/s / SMs)
    memory_s    = read_bytes / read ceiling + write_bytes / write ceiling
    overhead_s  = a fixed per-kernel cost (launch, prologue, tail; a memory-bound kernel's may differ)
    floor_s     = the shortest busy time of a plain (cuBLAS) GEMM kernel (0 for other kernels)

predicted_s is the kernel's own duration (what a profiler times). In a step of many kernels each one
also waits gap_s on the stream before it starts (the idle between consecutive kernels, even in a
replayed CUDA graph): OpRow.total_s = count x (predicted_s + gap_s).

(Williams, Waterman & Patterson, "Roofline", CACM 2009, plus the tile and wave quantisation of
NVIDIA's "Matrix Multiplication Background" performance guide). Ceilings come from
`calc.roofline.calibration` (datasheet x efficiency, or measured). `bytes` is the fewest bytes a kernel
must move (each input read once, each output written once): a lower bound that a kernel with
perfect on-chip reuse attains.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ...errors import require
from ...specs.gpu import DEFAULT_GPU, GPUSpec, normalise_dtype
from .calibration import Ceilings, gemm_class, load_ceilings
from .cublas_split import cublas_splits
from ..counts.attention import (BACKWARD_FLOPS_FACTOR, MASKS, AttentionShape, attention_bytes, attention_flops,
                        causal_fraction, keys_read)
from ..counts.attention import window_fraction  # noqa: F401  (re-exported: callers found it here before calc.counts.attention's MASKS)
from ...block_formats import FORMATS
from ...dtypes import bytes_per_element, dtype_name, value_bytes

# Output tile (BLOCK_M, BLOCK_N) candidates: CUTLASS/cuBLAS bf16 tiles on Hopper (128x256 with
# two consumer warpgroups, 128x128), smaller ones for shapes that cannot fill the SMs, and 16-row
# tiles (mma.m16n8k16) for skinny decode GEMMs. See _matmul_tiling for which are considered.
MATMUL_TILES = ((128, 256), (128, 128), (64, 128), (64, 64), (16, 128), (16, 64))
MIN_WAVE_FILL = 0.75  # below this busy share of the SM-waves, smaller tiles / split-K are considered
SPLIT_K = (1, 2, 4, 8, 16)  # split-K / stream-K factors considered for skinny shapes
MIN_K_PER_SPLIT = 256
BLOCK_K_BYTES = 128  # BLOCK_K x element size: 64 for 16-bit, 128 for 8-bit (one 128-byte row)
# Attention: query rows per CTA (FA2/FA3 prefill 128, decode kernels 64 or 16) and the KV step.
ATTN_BLOCK_M = (128, 64, 16)
ATTN_BLOCK_N = 128
KV_SPLITS = (1, 2, 4, 8, 16, 32, 64)  # flash-decoding splits of the KV sequence
# Prefill and training attention (more than one query a sequence) at short sequences and in the backward: the
# measured over the priced time of cuDNN's SDPA kernels on an H200 (reports/attention/rows.jsonl, torch 2.11, bf16,
# d128, H32, B x S = 16k tokens, S 1k-16k, three runs of the forward, one of the backward) follows
# factor x (1 + keys0 / Skv), per pass and mask: (factor, keys0). Forward full 0.95-1.08 (no correction); forward
# causal 1.33-1.37 at S1k, 1.17-1.22 at 2k, 1.08-1.13 at 4k, 1.04-1.08 at 8k, 1.01-1.06 at 16k; backward full 1.48,
# 1.30, 1.20, 1.13, 1.10; backward causal 2.16, 1.56, 1.37, 1.23, 1.15. Fitted through the 1k and 16k points; the
# 2k-8k points lie within 4% of the fit. A per-row-block fixed cost (softmax rescaling, the causal diagonal, the
# backward's dQ accumulation) that long rows amortise. Read on Hopper's cuDNN kernels, applied to every card.
ATTENTION_SHAPE = {("forward", False): (1.0, 0.0), ("forward", True): (1.008, 357.0),
                   ("backward", False): (1.080, 375.0), ("backward", True): (1.079, 1027.0)}
# Accumulator/output dtype where it differs from the inputs (torch._scaled_mm, torch._int_mm).
OUT_DTYPE = {"fp8": "bf16", "int8": "fp32",  # int8 -> int32: 4 bytes, as fp32
             **{name: "bf16" for name in FORMATS}}  # block-scaled GEMMs (NVFP4, MXFP4, MXFP6, MXFP8) write bf16
WEIGHT_GROUP = 128  # 4-bit weight-only: one bf16 scale per 128 weights
ALIGN_BYTES = 16  # cuBLAS's TMA/wgmma GEMMs need 16-byte aligned rows; others take its unaligned kernels
UNALIGNED_TILE_ROWS = 8  # from this many rows cuBLAS runs an unaligned GEMM on CUTLASS align1 kernels (below: GEMV, gemmSN)
# Attention head-dim tiles of cuDNN's SDPA kernels on Hopper (names ..._64x128x64, ..._64x64x128):
# a head dim is padded up to the next of these (`--impl torch`); d80 (phi-2) runs 128-wide tiles.
HEAD_DIM_TILES = (64, 128, 256)
# A plain skinny GEMM on Hopper runs on cuBLAS's nvjet kernels with 64 output columns a CTA (names
# nvjet_sm90_tst_64x8_..., 64x16, 64x32: N x M of the tile) and streams at most CTA_STREAM_BPS per
# CTA, so one with few CTAs cannot reach the HBM's rate (few_cta_stream). H100 80GB HBM3, torch
# 2.11, CUDA graphs, profiler time per kernel less the 2 us fixed cost: pythia-1.4b's unsplit
# 2048 x 2048 projections (32 CTAs, 8.45 MB) 6.45 us at B8, 6.6 us at B32: 59.3 and 58.8 GB/s a
# CTA (reports/models/h100_floor_host_heldout.jsonl, h100_memory_remeasured.jsonl; a fit-set model). Checked on held-out
# rows and on the H200: docs/roofline.md, "Few-CTA GEMMs". Other architectures: not measured, no cap.
CTA_COLUMNS = 64
CTA_ROWS = 64  # decode rows (at most this many a group) that one CTA's tile covers
CTA_STREAM_BPS = {"Hopper": 59e9}  # GPU architecture -> bytes/s one CTA streams at most
FEW_CTA_CLASS = "matmul_few_cta"  # the memory class of a GEMM priced by its CTAs' rate (not a fitted efficiency)


@dataclass(frozen=True)
class Tiling:
    block_m: int
    block_n: int
    split: int  # split-K (matmul) or KV splits (attention)
    units: int  # CTAs of work: tiles x splits (x groups)
    waves: int  # ceil(units / SMs)
    sms: int

    @property
    def wave_fill(self) -> float:
        """Busy fraction of the SM-waves: units / (waves x SMs) (1 = no idle SMs)."""
        return self.units / (self.waves * self.sms)


@dataclass(frozen=True)
class OpPrediction:
    name: str
    kind: str  # "matmul", "attention" or "memory"
    dtype: str
    flops: float  # useful FLOPs, 2 per multiply-add (memory ops: CUDA-core FLOPs, counted roughly)
    read_bytes: float
    write_bytes: float
    compute_s: float  # tile/wave-quantised FLOPs at the achievable compute ceiling
    memory_s: float  # bytes at the achievable read/write ceilings
    overhead_s: float
    roofline_s: float  # naive max(FLOPs / datasheet peak, bytes / datasheet bandwidth)
    ridge_flops_per_byte: float  # achievable compute roof / achievable bandwidth
    tiling: Tiling | None = None
    shape: str = ""
    dims: tuple[float, ...] = ()  # matmul: (tokens, groups, N, K); groups may be fractional (MoE)
    shape_class: str = ""  # matmul: "skinny" (memory-bound at matmul_skinny of the bandwidth) or "square"
    compute_class: str = "matmul"  # the efficiency field that priced compute_s (matmul, matmul_unaligned, attention, ...)
    memory_class: str = "memory"  # the one that priced memory_s (memory, matmul_skinny, memory_broadcast)
    floor_s: float = 0.0  # shortest busy time (plain GEMMs: ceilings.matmul_floor_s)
    gap_s: float = 0.0  # the stream's idle time before the kernel starts (ceilings.gap_s; not in predicted_s)

    @property
    def efficiency_class(self) -> str:
        """The efficiency class of the bound that sets the time (compute or memory)."""
        return self.compute_class if self.compute_s >= self.memory_s else self.memory_class

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.write_bytes

    @property
    def intensity_flops_per_byte(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    @property
    def predicted_s(self) -> float:
        return max(self.compute_s, self.memory_s, self.floor_s) + self.overhead_s

    @property
    def step_s(self) -> float:
        """Its share of a step of many kernels: the kernel's time plus the stream's gap before it."""
        return self.predicted_s + self.gap_s

    @property
    def bound(self) -> str:
        """compute or memory, whichever time is larger; overhead when the fixed cost (or the floor) exceeds both."""
        if max(self.overhead_s, self.floor_s) > max(self.compute_s, self.memory_s):
            return "overhead"
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def achievable_fraction(self) -> float:
        """Naive datasheet roofline time / predicted time: the share of the datasheet roof attained."""
        return self.roofline_s / self.predicted_s

    @property
    def attained_flops_per_s(self) -> float:
        return self.flops / self.predicted_s

    def as_dict(self) -> dict[str, Any]:
        skip = ("tiling", "dims", "compute_class", "memory_class")
        data = {k: v for k, v in asdict(self).items() if k not in skip and (k != "shape_class" or v)}
        data.update(
            efficiency_class=self.efficiency_class, bytes=self.bytes, intensity_flops_per_byte=self.intensity_flops_per_byte,
            predicted_s=self.predicted_s, step_s=self.step_s, bound=self.bound, achievable_fraction=self.achievable_fraction,
            attained_flops_per_s=self.attained_flops_per_s,
        )
        if self.tiling is not None:
            t = self.tiling
            data["tiling"] = {"block_m": t.block_m, "block_n": t.block_n, "split": t.split,
                              "units": t.units, "waves": t.waves, "wave_fill": t.wave_fill}
        return data


@lru_cache(maxsize=64)
def _cached(gpu: str, calibration: str | None) -> Ceilings:
    return load_ceilings(gpu, calibration)


def resolve_ceilings(gpu: str | GPUSpec | Ceilings, calibration: str | Path | dict | None = None) -> Ceilings:
    """Ceilings from a Ceilings (as is), a GPUSpec, or a GPU name (+ calibration path), cached."""
    if isinstance(gpu, Ceilings):
        return gpu
    if isinstance(gpu, GPUSpec) or isinstance(calibration, dict):
        return load_ceilings(gpu, calibration)
    return _cached(gpu, None if calibration is None else str(calibration))


def _finish(name: str, kind: str, dtype: str, flops: float, read: float, write: float, compute_s: float,
            ceil: Ceilings, tiling: Tiling | None, shape: str, peak_dtype: str, skinny: bool = False,
            compute_class: str = "", memory_class: str = "") -> OpPrediction:
    naive_peak = ceil.datasheet_flops(peak_dtype)
    roofline_s = max(flops / naive_peak, (read + write) / ceil.datasheet_Bps)
    compute_class = compute_class or ("attention" if kind == "attention" else "matmul")
    memory_class = memory_class or ("matmul_skinny" if skinny else "memory")
    ridge = ceil.ridge(peak_dtype, compute_class)
    return OpPrediction(
        name=name, kind=kind, dtype=dtype, flops=float(flops), read_bytes=float(read), write_bytes=float(write),
        compute_s=compute_s, memory_s=ceil.memory_s(read, write, cls=memory_class, kind=kind), overhead_s=ceil.overhead_s(kind),
        gap_s=ceil.gap_s, roofline_s=roofline_s, ridge_flops_per_byte=ridge, tiling=tiling, shape=shape,
        compute_class=compute_class, memory_class=memory_class,
    )


Config = tuple[int, int, int, int, int]  # (block_m, block_n, split, units, padded_k) of one tiling


def _least_time(configs: Iterable[Config], sms: int, block_time: Callable[[int, int, int], float]
                ) -> tuple[float, Tiling]:
    """The configuration (block_m, block_n, split, units, padded_k) with the least waves x tile time."""
    best: tuple[float, Tiling] | None = None
    for bm, bn, split, units, padded in configs:
        waves = math.ceil(units / sms)
        t = waves * block_time(bm, bn, padded)
        if best is None or t < best[0] * (1 - 1e-9):  # ties keep the earlier (larger) tile
            best = (t, Tiling(bm, bn, split, units, waves, sms))
    assert best is not None
    return best


def _matmul_configs(groups: int, m: int, n: int, k: int, block_k: int, sms: int, full: bool) -> Iterator[Config]:
    for bm, bn in MATMUL_TILES if full else MATMUL_TILES[:2]:
        tiles = groups * math.ceil(m / bm) * math.ceil(n / bn)
        for split in SPLIT_K if full else (1,):
            if split > 1 and k / split < MIN_K_PER_SPLIT:
                break
            yield bm, bn, split, tiles * split, math.ceil(k / split / block_k) * block_k


@lru_cache(maxsize=8192)  # pure; a layout search prices the same GEMM shapes in many roofline passes
def _matmul_tiling(groups: int, m: int, n: int, k: int, dtype: str, per_sm: float, sms: int) -> tuple[float, Tiling]:
    """Large tiles (128x256, 128x128, no split) for shapes they fill well, as cuBLAS heuristics pick;
    for skinny (M < 128) or poorly filled shapes (the best large-tile grid keeps fewer than
    MIN_WAVE_FILL of its SM-waves busy), smaller tiles and split-K as well: the least padded time."""
    block_k = max(16, int(BLOCK_K_BYTES / value_bytes(dtype)))  # a block-scaled format's scales ride beside

    def block_time(bm: int, bn: int, padded_k: int) -> float:
        return 2.0 * bm * bn * padded_k / per_sm

    best = _least_time(_matmul_configs(groups, m, n, k, block_k, sms, False), sms, block_time)
    if m >= 128 and best[1].wave_fill >= MIN_WAVE_FILL:
        return best
    return _least_time(_matmul_configs(groups, m, n, k, block_k, sms, True), sms, block_time)


def unaligned(lead_dims: tuple[int, ...], dtype: str, weight_dtype: str) -> bool:
    """A plain GEMM (weights in the compute dtype) with a leading dimension whose rows are not
    16-byte aligned."""
    if dtype_name(weight_dtype) != dtype_name(dtype):
        return False
    elements = max(1, int(ALIGN_BYTES / value_bytes(dtype)))
    return any(d % elements for d in lead_dims)


def padded_head_dim(d: int) -> int:
    """The head dim a tiled attention kernel computes on: the next of HEAD_DIM_TILES (past the
    last, the next multiple of it)."""
    for tile in HEAD_DIM_TILES:
        if d <= tile:
            return tile
    return math.ceil(d / HEAD_DIM_TILES[-1]) * HEAD_DIM_TILES[-1]


def predict_grouped_matmul(tokens: int, groups: float, n: int, k: int, dtype: str = "bf16",
                           gpu: str | GPUSpec | Ceilings = DEFAULT_GPU, calibration: Any = None, *,
                           weight_dtype: str | None = None, out_dtype: str | None = None,
                           lead_dims: tuple[int, ...] | None = None, name: str = "grouped_matmul",
                           experts: bool = False) -> OpPrediction:
    """`groups` matmuls (tokens/groups, K) @ (K, N), each with its own weight (MoE experts).

    groups may be fractional (an expected number of distinct experts): bytes use it as is, the
    tile count rounds it up.

    bytes = tokens*K*act + groups*N*K*weight (+ 4-bit group scales) + tokens*N*out. A GEMM
    streams its bytes at efficiency.matmul_skinny of the memory ceiling, which decides the time of
    the memory-bound (skinny: decode, few tokens per expert) ones; shape_class says which roof binds.
    A GEMM of plain (unquantized) weights with a leading dimension (`lead_dims`, default N and K:
    a forward or dgrad; a weight gradient's are M and N, its K being the tokens) that is not a
    multiple of ALIGN_BYTES / element size computes at efficiency.matmul_unaligned (cuBLAS's
    unaligned CUTLASS kernels) and, from UNALIGNED_TILE_ROWS rows, streams its bytes at
    efficiency.matmul_unaligned_stream. MoE experts (`experts`, more than one group) run as one grouped
    GEMM, which streams its bytes at efficiency.matmul_grouped_stream.
    """
    require(min(tokens, n, k) >= 1 and groups > 0, f"{name}: sizes must be positive")
    ceil = resolve_ceilings(gpu, calibration)
    act = dtype_name(dtype)  # the inputs' storage (nvfp4: values and block scales); computes at normalise_dtype's rate
    normalise_dtype(act)  # a storage-only dtype (int4) is not a compute dtype: an error here
    w_dtype = dtype_name(weight_dtype or act)
    out = dtype_name(out_dtype or OUT_DTYPE.get(act, act))
    m = math.ceil(tokens / groups)
    flops = 2.0 * tokens * n * k
    weight_bytes = groups * n * k * bytes_per_element(w_dtype)
    if w_dtype in ("int4", "nf4"):
        weight_bytes += groups * n * math.ceil(k / WEIGHT_GROUP) * bytes_per_element("bf16")
    read = tokens * k * bytes_per_element(act) + weight_bytes
    write = tokens * n * bytes_per_element(out)
    cls = "matmul_unaligned" if unaligned(lead_dims or (n, k), act, w_dtype) else gemm_class(act)
    stream = ("matmul_unaligned_stream" if cls == "matmul_unaligned" and m >= UNALIGNED_TILE_ROWS
              else "matmul_grouped_stream" if experts and groups > 1 else "")
    per_sm = ceil.flops_per_s(act, cls) / ceil.sm_count
    compute_s, tiling = _matmul_tiling(math.ceil(groups), m, n, k, act, per_sm, ceil.sm_count)
    shape = f"{groups:.3g}x({m}x{n}x{k})" if groups != 1 else f"{m}x{n}x{k}"
    pred = _finish(name, "matmul", act, flops, read, write, compute_s, ceil, tiling, shape, act, True, cls, stream)
    pred = replace(pred, dims=(tokens, groups, n, k))
    if w_dtype == act and not stream and m <= CTA_ROWS:
        pred = few_cta_stream(pred, ceil)
    skinny = pred.memory_s > pred.compute_s
    floor = ceil.matmul_floor_s if w_dtype == act else 0.0  # cuBLAS; weight-only kernels are the project's
    return replace(pred, shape_class="skinny" if skinny else "square", floor_s=floor)


def few_cta_stream(pred: OpPrediction, ceil: Ceilings) -> OpPrediction:
    """A skinny plain GEMM's (at most CTA_ROWS rows a group) bytes at no more than the card's
    CTA_STREAM_BPS per CTA: groups x ceil(N / CTA_COLUMNS) CTAs, times the tiling's split where
    cuBLAS splits K (cublas_splits), at most one a SM. Where that is slower than the stream at
    matmul_skinny, it prices memory_s (memory_class FEW_CTA_CLASS)."""
    rate = CTA_STREAM_BPS.get(ceil.gpu.architecture)
    if rate is None:
        return pred
    _, groups, n, _ = pred.dims
    ctas = math.ceil(groups) * math.ceil(n / CTA_COLUMNS)
    if pred.tiling is not None and cublas_splits(pred, ceil.sm_count):
        ctas *= pred.tiling.split
    capped = pred.bytes / (min(ctas, ceil.sm_count) * rate)
    return replace(pred, memory_s=capped, memory_class=FEW_CTA_CLASS) if capped > pred.memory_s else pred


def predict_matmul(m: int, n: int, k: int, dtype: str = "bf16", gpu: str | GPUSpec | Ceilings = DEFAULT_GPU,
                   calibration: Any = None, *, batch: int = 1, weight_dtype: str | None = None,
                   out_dtype: str | None = None, lead_dims: tuple[int, ...] | None = None,
                   name: str = "matmul") -> OpPrediction:
    """(M, K) @ (K, N) -> (M, N), `batch` times with separate operands; the harness's per-row call.

    FLOPs = 2*batch*M*N*K; bytes = batch*(M*K*a + N*K*w + M*N*out). fp8 writes bf16 and int8
    writes int32 (torch._scaled_mm / torch._int_mm) unless out_dtype says otherwise.
    """
    return predict_grouped_matmul(m * batch, batch, n, k, dtype, gpu, calibration,
                                  weight_dtype=weight_dtype, out_dtype=out_dtype, lead_dims=lead_dims, name=name)


def _attention_tiling(rows: int, units0: int, seq_kv: int, per_row_flops: float, per_sm: float,
                      sms: int) -> tuple[float, Tiling]:
    """FlashAttention-2 grid (128 query rows per CTA, whole KV per CTA) while it fills the SMs and
    has 128 rows to fill a block; otherwise smaller row blocks (decode kernels: 64 or 16 rows,
    cuDNN's `..._16x128x64_...`) and flash-decoding KV splits (least padded time)."""
    full = units0 * math.ceil(rows / ATTN_BLOCK_M[0]) < sms or rows < ATTN_BLOCK_M[0]

    def configs() -> Iterator[Config]:
        for bm in ATTN_BLOCK_M if full else ATTN_BLOCK_M[:1]:
            blocks = units0 * math.ceil(rows / bm)
            for split in KV_SPLITS if full else (1,):
                if split > 1 and seq_kv / split < ATTN_BLOCK_N:
                    break
                yield bm, ATTN_BLOCK_N, split, blocks * split, math.ceil(seq_kv / split / ATTN_BLOCK_N) * ATTN_BLOCK_N

    def block_time(bm: int, bn: int, padded_kv: int) -> float:
        return bm * padded_kv * per_row_flops / per_sm

    return _least_time(configs(), sms, block_time)


# the row name of each attention kind's kernel (backward and recompute rows find the kind back from it)
ATTENTION_ROWS = {"full_attention": "attention", "sliding_attention": "attention (window)",
                  "chunked_attention": "attention (chunked)"}


def attention_kind(row_name: str) -> str:
    """The attention kind whose kernel a row (forward, recompute or backward) prices."""
    base = row_name.removesuffix(".bwd")
    return next(kind for kind, name in ATTENTION_ROWS.items() if name == base)


def predict_attention(batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int, head_dim: int,
                      causal: bool = False, dtype: str = "bf16", gpu: str | GPUSpec | Ceilings = DEFAULT_GPU,
                      calibration: Any = None, *, v_head_dim: int | None = None, kv_dtype: str | None = None,
                      backward: bool = False, v_in_k: bool = False, window: int | None = None,
                      pad_head_dim: bool = False, name: str = "attention", mask: str = "sliding_attention",
                      sinks: bool = False) -> OpPrediction:
    """Flash-style attention softmax(Q K^T) V with the IO-aware byte count (no S x S round trip).

    FLOPs = 2*B*Sq*Skv*H*(d_qk + d_v) (x causal_fraction); bytes = Q + K + V read once, O written
    once (Dao et al. 2022, FlashAttention, section 3.2: the minimum; SRAM-sized re-reads of K/V
    are assumed served from L2). GQA: query heads sharing a KV head are packed into the rows of
    one tile, as decode kernels do. backward: FA2's 5 matmuls vs 2 (FLOPs x 2.5), reads Q, K, V,
    O, dO and writes dQ, dK, dV (Dao 2023, FlashAttention-2, algorithm 2). v_in_k: V is a slice
    of the cached K (absorbed MLA decode, DeepSeek-V2 section 2.1.2), read once. window (with
    causal): a kernel that skips the tiles outside the mask of kind `mask` (calc.counts.attention.MASKS; a
    sliding window W, or chunks of C = window): FLOPs x the mask's kept share, and only the keys from
    the first query's earliest visible one are read (Sq + W - 1 for a window). sinks (gpt-oss): one
    learned logit per head joins each softmax: no matmul, no cache, an fp32 logit read per query row. pad_head_dim (cuDNN's SDPA, `--impl torch`): the
    tiles compute on head dims padded to HEAD_DIM_TILES, and a 64-wide tile runs at
    efficiency.attention_small_head; FLOPs stay the useful ones.
    """
    require(min(batch, heads, kv_heads, seq_q, seq_kv, head_dim) >= 1, f"{name}: sizes must be positive")
    require(heads % kv_heads == 0, f"{name}: heads {heads} not divisible by kv_heads {kv_heads}")
    ceil = resolve_ceilings(gpu, calibration)
    act = dtype_name(dtype)
    normalise_dtype(act)  # attention computes in a compute dtype
    kv = dtype_name(kv_dtype or act)
    dv = v_head_dim or head_dim
    require(window is None or (causal and window >= 1), f"{name}: a window needs a causal mask and W >= 1")
    shape_ = AttentionShape(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dv, causal)
    frac = causal_fraction(seq_q, seq_kv) if causal else 1.0
    keys = seq_kv
    if window is not None:
        frac, keys = MASKS[mask].kept(seq_q, seq_kv, window), keys_read(mask, window, seq_q, seq_kv)
    flops = attention_flops(shape_, fraction=frac)
    read, write = attention_bytes(shape_, bytes_per_element(act), bytes_per_element(kv), backward, keys, v_in_k)
    read += batch * seq_q * heads * 4 if sinks else 0  # each query row's softmax reads its head's fp32 sink logit
    scale = BACKWARD_FLOPS_FACTOR if backward else 1.0
    d_qk, d_v, cls = head_dim, dv, "attention"
    if pad_head_dim:
        d_qk, d_v = padded_head_dim(head_dim), padded_head_dim(dv)
        cls = "attention_small_head" if d_qk <= HEAD_DIM_TILES[0] else cls
    per_sm = ceil.flops_per_s(act, cls) / ceil.sm_count
    group = heads // kv_heads
    per_row = 2.0 * (d_qk + d_v) * frac * scale
    compute_s, tiling = _attention_tiling(seq_q * group, batch * kv_heads, seq_kv, per_row, per_sm, ceil.sm_count)
    if seq_q > 1:
        factor, keys0 = ATTENTION_SHAPE[("backward" if backward else "forward", causal)]
        compute_s *= factor * (1.0 + keys0 / keys)
    shape = (f"B{batch} H{heads}/{kv_heads} {seq_q}x{seq_kv} d{head_dim}" + (" causal" if causal else "")
             + (f" {'chunk' if mask == 'chunked_attention' else 'window'} {window}" if window is not None else "") + (" sinks" if sinks else ""))
    return _finish(name, "attention", act, flops * scale, read, write, compute_s, ceil, tiling, shape, act,
                   compute_class=cls)


def predict_memory_op(name: str, read_bytes: float, write_bytes: float, flops: float = 0.0,
                      dtype: str = "bf16", gpu: str | GPUSpec | Ceilings = DEFAULT_GPU, calibration: Any = None,
                      shape: str = "", cls: str = "memory") -> OpPrediction:
    """A kernel without tensor-core work: its FLOPs run on CUDA cores at the fp32 (non-tensor) peak;
    its bytes at efficiency.memory, or at the class `cls` names (memory_broadcast)."""
    require(read_bytes >= 0 and write_bytes >= 0 and read_bytes + write_bytes > 0, f"{name}: no bytes moved")
    ceil = resolve_ceilings(gpu, calibration)
    cuda_core = ceil.flops_per_s("fp32", "matmul")
    return _finish(name, "memory", dtype_name(dtype), flops, read_bytes, write_bytes, flops / cuda_core,
                   ceil, None, shape, "fp32", memory_class=cls)


@dataclass(frozen=True)
class OpRow:
    """One kernel of a model step and how many times the step runs it (layers x occurrences)."""

    pred: OpPrediction
    group: str  # "attention", "mlp", "norm", "head" or "optimizer"
    layers: str  # which layers run it: "layers", "moe layers", "head", "step"
    count: int
    pass_name: str = "forward"  # "forward", "backward" or "optimizer"

    @property
    def busy_s(self) -> float:
        """The kernels' own time (what a profiler times them at)."""
        return self.count * self.pred.predicted_s

    @property
    def total_s(self) -> float:
        """Their share of the step: busy time plus the idle gap before each kernel."""
        return self.count * self.pred.step_s

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "layers": self.layers, "count": self.count, "pass": self.pass_name,
                **self.pred.as_dict(), "busy_s": self.busy_s, "total_s": self.total_s}
