"""Per-config GPU times of the kernels' candidate configurations on the shapes where a goal is missed.

A developer's probe, not a benchmark of record: it times every candidate (tile, warps, stages,
split count, load path) by GPU time on a cold L2 (kernels/tuning.gpu_time_ms: CUDA-graph replay
minus the flushes) beside the torch baseline in the same process, after checking each
candidate's output against the baseline. The reports come from `mlsys bench`; this says which
candidates deserve to become defaults.

    python experiments/probe_configs.py matmul|decode|forward|gemv|flush|stream|bound|kinds [--out DIR]

Writes DIR/probe_<section>.jsonl (one line per candidate and shape) and prints the best per shape.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import triton
import triton.language as tl

from mlsyscalc.bench.cases.attention import sdpa
from mlsyscalc.bench.harness import check_close
from mlsyscalc.bench.shapes import PROJECTIONS
from mlsyscalc.kernels import matmul as mm
from mlsyscalc.kernels import matmul_launch
from mlsyscalc.kernels.tuning import gpu_time_ms


def timed(fn, ref, tol):
    """(gpu ms, do_bench ms, rel err, error text): the candidate is timed only after its output passes the
    harness's relative-Frobenius check at `tol`."""
    try:
        out = fn()
        check = check_close(out[0] if isinstance(out, tuple) else out, ref, "bfloat16", tol)
        if not check.ok:
            return None, None, check.rel_err, check.message
        gpu = gpu_time_ms(fn)
        bench = triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
        return gpu, bench, check.rel_err, ""
    except Exception as e:  # noqa: BLE001 - out of resources, compile failure: a row with the error
        torch.cuda.synchronize()
        return None, None, None, f"{type(e).__name__}: {str(e)[:200]}"


def emit(out, section, row):
    row = dict(section=section, **row)
    out.write(json.dumps(row) + "\n")
    out.flush()
    g, b = row.get("gpu_ms"), row.get("bench_ms")
    print(f"{section} {row['shape']:<34} {row['cand']:<44} gpu {g if g is None else round(g * 1e3, 1)} us "
          f"bench {b if b is None else round(b * 1e3, 1)} us {row.get('error', '')}", flush=True)


# ---------------------------------------------------------------- matmul

MATMUL_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (2048, 4096, 4096), (8192, 4096, 4096),
                 (16384, 4096, 4096), (8192, 4096, 11008)]
# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, GROUP_M): the tuned space and its neighbours
MATMUL_CONFIGS = [
    (128, 256, 64, 3, 8, 8), (256, 128, 64, 3, 8, 8), (128, 256, 64, 4, 8, 8), (128, 128, 64, 4, 8, 8),
    (128, 128, 64, 5, 4, 8), (64, 256, 64, 4, 4, 8), (128, 128, 128, 3, 8, 8), (64, 128, 64, 4, 4, 8),
    (128, 64, 64, 4, 4, 8),
    # new candidates: fewer k-steps for short K, deeper pipelines, 8-warp small tiles, other groupings
    (64, 128, 128, 3, 4, 8), (128, 64, 128, 3, 4, 8), (64, 64, 128, 4, 4, 8), (128, 64, 64, 6, 4, 8),
    (64, 128, 64, 6, 4, 8), (128, 128, 64, 4, 8, 1), (128, 256, 64, 3, 8, 4), (128, 256, 64, 3, 8, 16),
    (256, 128, 64, 3, 8, 16), (128, 256, 64, 4, 8, 16), (64, 64, 64, 6, 4, 8),
]


def probe_matmul(out, shapes):
    torch.manual_seed(0)
    matmul_launch.use_scratch_allocator()
    for M, N, K in shapes:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5
        b = w.T
        ref = torch.matmul(x.float(), b.float())
        shape = f"{M}x{N}x{K}"
        g, bn, e, err = timed(lambda: torch.matmul(x, b), ref, 1e-2)
        emit(out, "matmul", dict(shape=shape, cand="cublas", gpu_ms=g, bench_ms=bn, rel_err=e, error=err))
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        strides = mm._dtma_strides(x, b, c)
        args = dict(SCALE=mm.SCALE_NONE, HAS_BIAS=False, ACT=0, INT8=False)
        num_sms = matmul_launch.sm_count(x.device)
        for bm, bn_, bk, st, wp, gm in MATMUL_CONFIGS:
            tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn_)

            def run(bm=bm, bn_=bn_, bk=bk, st=st, wp=wp, gm=gm, tiles=tiles):
                mm._matmul_dtma_kernel[(min(num_sms, tiles),)](
                    x, b, c, c, c, c, M, N, K, *strides, BLOCK_M=bm, BLOCK_N=bn_, BLOCK_K=bk, GROUP_M=gm,
                    NUM_SMS=num_sms, A_T=False, B_NK=True, **args, num_stages=st, num_warps=wp)
                return c

            c.zero_()   # a config that writes nothing must not pass on an earlier config's output
            g, bt, e, err = timed(run, ref, 1e-2)
            emit(out, "matmul", dict(shape=shape, cand=f"dtma {bm}x{bn_}x{bk} s{st} w{wp} g{gm}", gpu_ms=g,
                                     bench_ms=bt, rel_err=e, error=err, tiles=tiles))
        if M * N <= 2048 * 4096:   # few-tile shapes: the same tiles with pointer loads and with host descriptors
            strides_ptr = (*x.stride(), *b.stride(), *c.stride())
            a_desc, b_desc, a_t, b_nk = mm._descriptors(x, b)
            from triton.tools.tensor_descriptor import TensorDescriptor

            c_desc = TensorDescriptor.from_tensor(c, [16, 16])
            for bm, bn_, bk, st, wp, gm in MATMUL_CONFIGS:
                tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn_)
                if bm * bn_ > 128 * 128 or tiles > 4 * num_sms:
                    continue

                def run_ptr(bm=bm, bn_=bn_, bk=bk, st=st, wp=wp, gm=gm, tiles=tiles):
                    mm._matmul_ptr_kernel[(min(num_sms, tiles),)](
                        x, b, c, c, c, c, M, N, K, *strides_ptr, BLOCK_M=bm, BLOCK_N=bn_, BLOCK_K=bk, GROUP_M=gm,
                        NUM_SMS=num_sms, **args, num_stages=st, num_warps=wp)
                    return c

                def run_tma(bm=bm, bn_=bn_, bk=bk, st=st, wp=wp, gm=gm, tiles=tiles):
                    mm._set_block_shapes(dict(a_desc=a_desc, b_desc=b_desc, c_desc=c_desc, BLOCK_M=bm, BLOCK_N=bn_,
                                              BLOCK_K=bk, A_T=a_t, B_NK=b_nk))
                    mm._matmul_tma_kernel[(min(num_sms, tiles),)](
                        a_desc, b_desc, c_desc, c, c, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn_, BLOCK_K=bk, GROUP_M=gm,
                        NUM_SMS=num_sms, A_T=a_t, B_NK=b_nk, **args, num_stages=st, num_warps=wp)
                    return c

                for label, run_fn in (("ptr", run_ptr), ("tma", run_tma)):
                    c.zero_()
                    g, bt, e, err = timed(run_fn, ref, 1e-2)
                    emit(out, "matmul", dict(shape=shape, cand=f"{label} {bm}x{bn_}x{bk} s{st} w{wp} g{gm}", gpu_ms=g,
                                             bench_ms=bt, rel_err=e, error=err, tiles=tiles))
        # whole paths through matmul() (their own autotuners pick the config)
        for label, kw in (("auto", {}), ("tma", dict(path="tma")), ("ptr", dict(path="ptr")),
                          ("splitk1", dict(split_k=1)), ("splitk2", dict(split_k=2)), ("splitk4", dict(split_k=4))):
            if label.startswith("splitk") and M * N > 4096 * 4096:
                continue
            g, bt, e, err = timed(lambda kw=kw: mm.matmul(x, b, **kw), ref, 1e-2)
            emit(out, "matmul", dict(shape=shape, cand=f"matmul() {label}", gpu_ms=g, bench_ms=bt, rel_err=e, error=err))
        del x, w, b, c, ref
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- decode

DECODE_SHAPES = [(64, 32, 8, 1024, None), (64, 32, 8, 1024, 16), (64, 32, 8, 2048, None), (64, 32, 8, 2048, 16),
                 (64, 32, 32, 1024, None), (64, 32, 8, 4096, None)]
DECODE_CONFIGS = [(64, 4, 3), (64, 4, 4), (128, 8, 3), (32, 4, 4), (128, 4, 3), (64, 8, 3), (128, 8, 4),
                  (64, 4, 2), (32, 2, 4), (256, 8, 2)]


def probe_decode(out, shapes):
    from mlsyscalc.kernels import attention_decode as dec

    torch.manual_seed(0)
    d = 128
    for B, H, HKV, S, page in shapes:
        q = torch.randn(B, H, 1, d, device="cuda", dtype=torch.bfloat16)
        if page is None:
            k = torch.randn(B, HKV, S, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(B, HKV, S, d, device="cuda", dtype=torch.bfloat16)
            table = None
        else:
            nb = B * S // page
            k = torch.randn(nb, page, HKV, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(nb, page, HKV, d, device="cuda", dtype=torch.bfloat16)
            table = torch.randperm(nb, device="cuda", dtype=torch.int32).reshape(B, S // page)
        if table is None:
            ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        else:
            ref = dec.decode_ref(q, k, v, block_table=table)
        shape = f"B{B}xH{H}xKV{HKV}x{S}" + ("" if page is None else f"xpage{page}")
        nbytes = 2 * k.numel() * k.element_size()
        if table is None:
            for backend in ("cudnn", "flash", "efficient"):
                g, bt, e, err = timed(lambda backend=backend: sdpa(backend)(q, k, v, False), ref, 2e-2)
                emit(out, "decode", dict(shape=shape, cand=f"sdpa_{backend}", gpu_ms=g, bench_ms=bt, rel_err=e,
                                         error=err, bytes=nbytes))
        for splits in (1, 2, 3, 4, 8):
            g, bt, e, err = timed(lambda s=splits: dec.decode_attention(q, k, v, block_table=table, num_splits=s),
                                  ref, 2e-2)
            emit(out, "decode", dict(shape=shape, cand=f"tuned splits={splits}", gpu_ms=g, bench_ms=bt, rel_err=e,
                                     error=err, bytes=nbytes))
            for bn, wp, st in DECODE_CONFIGS:
                cfg = dict(BLOCK_N=bn, num_warps=wp, num_stages=st)
                g, bt, e, err = timed(lambda s=splits, cfg=cfg: dec.decode_attention(
                    q, k, v, block_table=table, num_splits=s, config=cfg), ref, 2e-2)
                emit(out, "decode", dict(shape=shape, cand=f"splits={splits} n{bn} w{wp} s{st}", gpu_ms=g,
                                         bench_ms=bt, rel_err=e, error=err, bytes=nbytes))
        g, bt, e, err = timed(lambda: dec.decode_attention(q, k, v, block_table=table), ref, 2e-2)
        emit(out, "decode", dict(shape=shape, cand="default", gpu_ms=g, bench_ms=bt, rel_err=e, error=err,
                                 bytes=nbytes))
        del q, k, v, ref
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- forward

FORWARD_SHAPES = [(16, 32, 1024, False), (16, 32, 1024, True), (8, 32, 2048, False), (8, 32, 2048, True)]
# (BLOCK_M, BLOCK_N, warps, stages, maxnreg or None)
FORWARD_CONFIGS = [(128, 64, 8, 3, None), (128, 64, 8, 4, None), (128, 128, 8, 2, None), (128, 128, 8, 3, None),
                   (128, 64, 8, 2, None), (128, 64, 8, 2, 128), (128, 32, 8, 4, None), (64, 64, 4, 3, None),
                   (64, 128, 4, 3, None)]


def probe_forward(out, shapes):
    from mlsyscalc.kernels import attention_fwd as fwd

    torch.manual_seed(0)
    d = 128
    for B, H, S, causal in shapes:
        q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        shape = f"B{B}xH{H}xS{S}" + ("xcausal" if causal else "")
        flops = 4.0 * B * H * S * S * d * (0.5 if causal else 1.0)
        for backend in ("flash", "cudnn"):
            g, bt, e, err = timed(lambda backend=backend: sdpa(backend)(q, k, v, causal), ref, 2e-2)
            emit(out, "forward", dict(shape=shape, cand=f"sdpa_{backend}", gpu_ms=g, bench_ms=bt, rel_err=e,
                                      error=err, flops=flops))
        for use_desc in (False, True):
            for bm, bn, wp, st, reg in FORWARD_CONFIGS:
                cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=wp, num_stages=st)
                if reg is not None:
                    cfg["maxnreg"] = reg
                g, bt, e, err = timed(lambda cfg=cfg, u=use_desc: fwd.attention_forward(
                    q, k, v, causal, config=cfg, use_desc=u), ref, 2e-2)
                emit(out, "forward", dict(shape=shape, cand=f"{'desc' if use_desc else 'ptr'} {bm}x{bn} w{wp} s{st}"
                                          + ("" if reg is None else f" r{reg}"),
                                          gpu_ms=g, bench_ms=bt, rel_err=e, error=err, flops=flops))
        g, bt, e, err = timed(lambda: fwd.attention_forward(q, k, v, causal), ref, 2e-2)
        emit(out, "forward", dict(shape=shape, cand="default", gpu_ms=g, bench_ms=bt, rel_err=e, error=err, flops=flops))
        del q, k, v, ref
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- gemv (weight-only decode)

def _quantised(x, w, bits, group):
    """(q, scales, the GEMV's packing of q, fp reference of x @ dequant(q).T) for weights w: int8 per row or
    int4 with bf16 scales per `group`."""
    from mlsyscalc.kernels import quant as Q
    from mlsyscalc.kernels.quant import pack_halves

    q, sc = Q.quantize(w, "int8" if bits == 8 else "int4", group, torch.bfloat16)
    return q, sc, (pack_halves(q, group) if bits == 4 else q), Q.weight_only_matmul_ref(x, q, sc, bits, group)


GEMV_SHAPES = [(1, 4096, 4096), (1, 8192, 8192), (1, 28672, 8192), (1, 57344, 8192), (16, 8192, 8192)]


def probe_gemv(out, shapes):
    """Every tile of the three GEMV kernels (plain, K split over warps, over programs; `gemv(kind, config)`)
    for int8 and int4 g128 weights, beside bf16 cuBLAS on the same weights dequantised: where the fixed
    cost of the small weights goes."""
    from mlsyscalc.kernels import quant_gemv as G

    torch.manual_seed(0)
    for M, N, K in shapes:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda")
        shape = f"{M}x{N}x{K}"
        w16 = w.to(torch.bfloat16)
        g, bt, e, err = timed(lambda: torch.matmul(x, w16.T), torch.matmul(x.float(), w16.float().T), 1e-2)
        emit(out, "gemv", dict(shape=shape, cand="cublas bf16", gpu_ms=g, bench_ms=bt, rel_err=e, error=err,
                               bytes=2 * N * K))
        for bits, group in ((8, None), (4, 128)):
            q, sc, qk, ref = _quantised(x, w, bits, group)
            nbytes = qk.numel() + 2 * sc.numel()
            for kind, tuned in G.TUNED.items():
                configs = G._ks_prune(tuned.configs, {}, BITS=bits, GROUP=group) if kind == "ks" else tuned.configs
                for c in configs:
                    cfg = dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)
                    def run(kind=kind, cfg=cfg):
                        return G.gemv(x, qk, sc, bits, group, kind=kind, config=cfg)

                    g, bt, e, err = timed(run, ref, 2e-2)
                    emit(out, "gemv", dict(shape=shape, cand=f"w{bits} {kind} {c.kwargs} w{c.num_warps} s{c.num_stages}",
                                           gpu_ms=g, bench_ms=bt, rel_err=e, error=err, bytes=nbytes))
            g, bt, e, err = timed(lambda: G.gemv(x, qk, sc, bits, group), ref, 2e-2)
            emit(out, "gemv", dict(shape=shape, cand=f"w{bits} default", gpu_ms=g, bench_ms=bt, rel_err=e, error=err,
                                   bytes=nbytes))
        del x, w, w16
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- stream (the GEMV's weight reads without its arithmetic)

@triton.jit
def _stream_kernel(w_ptr, out_ptr, N, KW, stride_wn, BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr,
                   LAYOUT: tl.constexpr, CW: tl.constexpr):
    """Reads N x KW int32 words of weights in the GEMV's tile order (BLOCK_N rows x BLOCK_KW words per step, one
    program per row tile over all of K) and keeps only an xor of the words, so the time is the load pattern's
    alone. LAYOUT says where word (n, k) lives: 0 row-major (the GEMV's layout: each step reads BLOCK_N pieces
    of 4 * BLOCK_KW bytes, K / 2 bytes apart); 1 bands of 16 rows, each band stored as chunks of 16 rows x CW
    words, contiguous (16 * 4 * CW bytes) and in k order, so a program streams BLOCK_N / 16 contiguous runs;
    2 each program's whole tile contiguous, step after step (one contiguous run per program)."""
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_KW)
    acc = tl.zeros((BLOCK_N, BLOCK_KW), dtype=tl.int32)
    for k0 in range(0, KW, BLOCK_KW):
        k = k0 + kk
        ok = (offs_n[:, None] < N) & (k[None, :] < KW)
        if LAYOUT == 0:
            addr = offs_n[:, None] * stride_wn + k[None, :]
        elif LAYOUT == 1:
            band = offs_n // 16
            chunk = k // CW
            addr = ((band[:, None] * (KW // CW) + chunk[None, :]) * 16 + (offs_n % 16)[:, None]) * CW + (k % CW)[None, :]
        else:
            addr = pid * BLOCK_N * KW + k0 * BLOCK_N + tl.arange(0, BLOCK_N)[:, None] * BLOCK_KW + kk[None, :]
        acc ^= tl.load(w_ptr + addr, mask=ok, other=0)
    tl.store(out_ptr + pid, tl.xor_sum(tl.xor_sum(acc, axis=1), axis=0))


def _stream(w, res, N, bn, row_bytes, warps, stages, layout=0, chunk_bytes=64):
    """One _stream_kernel launch over the (N, KW) int32 weights w, one program per bn rows; returns res."""
    _stream_kernel[(triton.cdiv(N, bn),)](w, res, N, w.shape[1], w.stride(0), BLOCK_N=bn, BLOCK_KW=row_bytes // 4,
                                          LAYOUT=layout, CW=chunk_bytes // 4, num_warps=warps, num_stages=stages)
    return res


def _xor_all(t: torch.Tensor) -> int:
    """The xor of every element (pairwise halving on the tensor's device)."""
    flat = t.flatten()
    while flat.numel() > 1:
        if flat.numel() % 2:
            flat = torch.cat([flat, flat.new_zeros(1)])
        flat = flat[0::2] ^ flat[1::2]
    return int(flat.item())


STREAM_SHAPES = [(57344, 8192), (8192, 8192), (4096, 4096)]   # (N, K) weights, as in the decode sweep
BOUND_SHAPES = list(PROJECTIONS.values())                      # every weight of the decode sweep
# (bits, BLOCK_N, bytes of a row per step, warps, stages): the GEMV tiles the tuner chose on these shapes
# (int4: 128-256 B of a row per step; int8: 256-512 B), and longer row steps beside them
STREAM_TILES = [(4, 64, 128, 4, 4), (4, 32, 256, 4, 4), (4, 64, 256, 4, 3), (4, 128, 128, 4, 4), (4, 64, 512, 4, 3),
                (8, 64, 512, 8, 3), (8, 32, 512, 4, 4), (8, 128, 256, 4, 3), (8, 64, 1024, 8, 3)]


def probe_stream(out, shapes):
    """The GEMV's weight reads alone, per tile and per layout: if the row-major reads (layout 0) stay near the
    GEMV's 2.3 TB/s where a blocked layout (1: 16-row bands of 1-2 KB chunks; 2: each program's tile
    contiguous) reaches the copy bandwidth, the GEMV's limit is its load pattern, and a repacked weight
    layout is the fix; if all three are fast, the limit is its arithmetic or latency."""
    torch.manual_seed(0)
    for N, K in shapes:
        for bits, bn, row_bytes, wp, st in STREAM_TILES:
            w = torch.randint(-2**31, 2**31 - 1, (N, K * bits // 32), device="cuda", dtype=torch.int32)
            res = torch.empty(triton.cdiv(N, bn), device="cuda", dtype=torch.int32)
            chunk = 64 if bits == 4 else 128   # bytes of a band's row per chunk: int4 g128's group, int8's 128 k
            for layout in (0, 1, 2):
                def run(w=w, res=res, bn=bn, row_bytes=row_bytes, wp=wp, st=st, layout=layout):
                    return _stream(w, res, N, bn, row_bytes, wp, st, layout, chunk)

                run()
                ok = _xor_all(res) == _xor_all(w)   # every word was read, once
                g = gpu_time_ms(run)
                bt = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
                nbytes = w.numel() * 4
                emit(out, "stream", dict(shape=f"{N}x{K} int{bits}", cand=f"L{layout} n{bn} {row_bytes}B/row w{wp} s{st}",
                                         gpu_ms=g, bench_ms=bt, bytes=nbytes, error="" if ok else "checksum mismatch",
                                         gpu_GBps=nbytes / g / 1e6))
            del w, res
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- kinds (each GEMV kernel, tuned, on the M = 1 weights)

def probe_kinds(out, shapes):
    """Each GEMV kernel kind (quant_gemv.KINDS), autotuned, on every decode weight with one row of x and int4
    g128 weights, beside bf16 cuBLAS: GPU time and do_bench."""
    from mlsyscalc.bench.harness import time_ms
    from mlsyscalc.kernels import quant_gemv as G

    torch.manual_seed(0)
    for N, K in shapes:
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda")
        w16 = w.to(torch.bfloat16)
        shape = f"1x{N}x{K}"
        emit(out, "kinds", dict(shape=shape, cand="cublas bf16", gpu_ms=gpu_time_ms(lambda: torch.matmul(x, w16.T)),
                                bench_ms=time_ms(lambda: torch.matmul(x, w16.T))))
        q, sc, qk, ref = _quantised(x, w, 4, 128)
        for kind in G.KINDS:
            def run(kind=kind):
                return G.gemv(x, qk, sc, 4, 128, kind=kind)

            g, bt, e, err = timed(run, ref, 2e-2)
            emit(out, "kinds", dict(shape=shape, cand=f"w4 {kind}: {G.TUNED[kind].best_config}", gpu_ms=g, bench_ms=bt,
                                    rel_err=e, error=err))
        del x, w, w16, q, sc, qk
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- bound (the fastest read of a quantised weight's bytes)

def probe_bound(out, shapes):
    """For each decode weight (N, K): the bf16 cuBLAS GEMV that the W8A16/W4A16 rows are divided by, and the
    fastest of three reads of the int8 and int4 g128 weights' bytes (cuBLAS bf16 GEMV over a matrix of that
    many bytes, torch.sum over them as fp32, this probe's stream kernel in the GEMV's best tile), all timed as
    the harness times the rows (harness.time_ms: do_bench median, L2 flushed before each call). A GEMV must
    read its weights once, so baseline / fastest read bounds what any kernel's ratio can be on that shape,
    as far as these readers are the fastest; an empty launch is timed beside them."""
    from mlsyscalc.bench.harness import time_ms

    torch.manual_seed(0)
    one = torch.zeros(1, device="cuda")
    emit(out, "bound", dict(shape="-", cand="empty launch (one-element fill)", bench_ms=time_ms(one.zero_)))
    for N, K in shapes:
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        shape = f"{N}x{K}"
        emit(out, "bound", dict(shape=shape, cand="baseline cublas bf16", bytes=2 * N * K,
                                bench_ms=time_ms(lambda: torch.matmul(x, w.T))))
        for bits, tile in ((8, (64, 1024, 8, 3)), (4, (64, 512, 4, 3))):
            nbytes = N * K * bits // 8 + 2 * N * (K // (K if bits == 8 else 128))
            rows = -(-nbytes // (2 * K))
            flat = torch.randn(-(-nbytes // 4), device="cuda")
            wq = torch.randint(-2**31, 2**31 - 1, (N, K * bits // 32), device="cuda", dtype=torch.int32)
            res = torch.empty(triton.cdiv(N, tile[0]), device="cuda", dtype=torch.int32)
            bn, row_bytes, wp, st = tile

            def stream(wq=wq, res=res, bn=bn, row_bytes=row_bytes, wp=wp, st=st):
                return _stream(wq, res, N, bn, row_bytes, wp, st)

            wr = w[:rows]
            for cand, fn in ((f"int{bits} bytes: cublas bf16 GEMV over {rows}x{K}", lambda: torch.matmul(x, wr.T)),
                             (f"int{bits} bytes: torch.sum fp32", lambda: torch.sum(flat)),
                             (f"int{bits} bytes: stream kernel n{bn} {row_bytes}B/row w{wp} s{st}", stream)):
                emit(out, "bound", dict(shape=shape, cand=cand, bytes=nbytes, bench_ms=time_ms(fn)))
            del flat, wq, res
        del x, w
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- flush (what do_bench's L2 flush costs a small read)

FLUSH_SHAPES = [(1, 8192, 8192), (1, 4096, 4096), (1, 8192, 4096), (1, 16384, 8192), (1, 28672, 8192),
                (1, 57344, 8192)]   # --quick: the first, then the decode shape


def _timed_with(fn, flush, reps=50):
    """Median ms of fn between two events, `flush` before each call: do_bench's loop with the flush swapped."""
    fn()
    times = []
    for _ in range(reps):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in times)[reps // 2]


def probe_flush(out, shapes):
    """A plain read (torch.amax), bf16 cuBLAS GEMV and the int8 GEMV over weights of 17-940 MB, then decode
    attention at B64 x H32 x KV8 x 1k (268 MB of K/V), each timed after three different L2 flushes:
    do_bench's (zeroing 256 MB: leaves the L2 full of dirty lines, which a read must write back before it
    can use them), a 256 MB read (a clean L2 of other data) and none (L2 warm where the data fit).
    The difference zero - read is what the dirty lines cost a kernel inside do_bench's window."""
    from mlsyscalc.kernels import attention_decode as dec
    from mlsyscalc.kernels import quant as Q
    from mlsyscalc.kernels import quant_gemv as G
    from mlsyscalc.kernels.quant import pack_halves

    buf = torch.empty(256 * 1024 * 1024 // 4, device="cuda", dtype=torch.float32)
    buf.zero_()
    sink = torch.empty((), device="cuda", dtype=torch.float32)
    flushes = {"zero": buf.zero_, "read": lambda: torch.amax(buf, dim=0, out=sink), "none": lambda: None}

    def measure(shape, cands):
        for cand, fn, nbytes in cands:
            row = dict(shape=shape, cand=cand, bytes=nbytes,
                       bench_ms=triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))
            for name, flush in flushes.items():
                row[f"{name}_ms"] = _timed_with(fn, flush)
            emit(out, "flush", row)
            print("   ", {k: round(v * 1e3, 1) for k, v in row.items() if k.endswith("_ms")},
                  f"{nbytes / row['zero_ms'] / 1e6:.0f} GB/s zero-flushed, {nbytes / row['read_ms'] / 1e6:.0f} read-flushed",
                  flush=True)

    torch.manual_seed(0)
    for M, N, K in shapes:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda")
        w16 = w.to(torch.bfloat16)
        q, sc = Q.quantize(w, "int8", None, torch.bfloat16)
        q4, sc4 = Q.quantize(w, "int4", 128, torch.bfloat16)
        q4 = pack_halves(q4, 128)
        red = torch.empty(K, device="cuda", dtype=torch.bfloat16)
        measure(f"{M}x{N}x{K}", [("read bf16 (amax)", lambda: torch.amax(w16, dim=0, out=red), 2 * N * K),
                                 ("cublas bf16", lambda: torch.matmul(x, w16.T), 2 * N * K),
                                 ("w8 default", lambda: G.gemv(x, q, sc, 8), N * K),
                                 ("w4 default", lambda: G.gemv(x, q4, sc4, 4, 128), N * K // 2 + 2 * sc4.numel())])
        del x, w, w16, q, sc, q4, sc4
        torch.cuda.empty_cache()
    B, H, HKV, S, d = 64, 32, 8, 1024, 128
    qd = torch.randn(B, H, 1, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, HKV, S, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    measure(f"decode B{B}xH{H}xKV{HKV}x{S}", [("decode default", lambda: dec.decode_attention(qd, k, v), 4 * k.numel()),
                                            ("sdpa_cudnn", lambda: sdpa("cudnn")(qd, k, v, False), 4 * k.numel())])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=["matmul", "decode", "forward", "gemv", "flush", "stream", "bound", "kinds"])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="first shape only")
    ap.add_argument("--small", action="store_true", help="matmul: the few-tile shapes only")
    a = ap.parse_args()
    shapes = {"matmul": MATMUL_SHAPES, "decode": DECODE_SHAPES, "forward": FORWARD_SHAPES, "gemv": GEMV_SHAPES,
              "flush": FLUSH_SHAPES, "stream": STREAM_SHAPES, "bound": BOUND_SHAPES, "kinds": BOUND_SHAPES}[a.section]
    shapes = shapes[:1] if a.quick else shapes
    if a.small:
        shapes = [sh for sh in shapes if sh[0] * sh[1] <= 2048 * 4096]
    fn = {"matmul": probe_matmul, "decode": probe_decode, "forward": probe_forward, "gemv": probe_gemv,
          "flush": probe_flush, "stream": probe_stream, "bound": probe_bound, "kinds": probe_kinds}[a.section]
    t0 = time.time()
    with open(os.path.join(a.out, f"probe_{a.section}.jsonl"), "a") as out:
        out.write(json.dumps(dict(section=a.section, env=dict(torch=torch.__version__, triton=triton.__version__,
                                                              gpu=torch.cuda.get_device_name(),
                                                              commit=os.environ.get("MLSYS_GIT_COMMIT", "")))) + "\n")
        fn(out, shapes)
    print(f"{a.section}: {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
