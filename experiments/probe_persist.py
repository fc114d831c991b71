"""Probe: can a persistent forward attention kernel take the 1k-token forward goal? (developer evidence, not a benchmark
of record; results and findings in experiments/data/README.md and reports/attention/notes.md)

`python experiments/probe_persist.py persist` times attention_fwd_persistent_kernel (below) in the VARIANTS against the
default forward (kernels/attention_fwd.py) and SDPA's FLASH and cuDNN backends; `... tiles` times the default kernel
on host-built descriptors with the fixed TILES, 256-row tiles included. bf16, d = 128, do_bench medians with the L2
flushed, as the reports time; each candidate is checked against SDPA FLASH (max error / max |o| <= 2e-2) before it
is timed. Rows are appended to $OUT/probe_persist.jsonl.

The persistent kernel launches `programs per SM` x SMs programs; each walks the (query block, batch x head) tiles
from its id in steps of the program count. Causal tiles go in snake order (every other round reversed), so a
program's tiles alternate long and short rows. With `flatten`, the tile loop is `tl.range(..., flatten=True)`:
triton fuses it with the KV loop into one pipelined loop, so the next tile's first K/V loads are issued during this
tile's last iterations. That fusion needs a KV trip count that does not vary by tile, so non-causal only. Q comes
through a tensor descriptor, or through pointers (`q_ptr`; the descriptor load does not compile inside the fused
loop), optionally loaded a tile ahead into registers (`Q prefetched`), and optionally made a register operand of
the QK product (`Q a register operand`; multiplied by a runtime 1.0). Without that, the fused loop's results are
wrong on the GPU while right under TRITON_INTERPRET (where flatten is ignored): Q's shared-memory copy has one
buffer per allocation site, and the next tile's Q is written there while this tile's last QK product still
reads it. `PV waited in-iteration` puts a register copy (inline PTX) on the PV product, so triton waits for the
wgmma inside the iteration; it did not change the wrong results.
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch
import triton
import triton.language as tl

from mlsyscalc.bench.cases.attention import sdpa
from mlsyscalc.kernels.attention_fwd import LOG2E, _online_softmax


@triton.jit
def _coords(tile, num_m, num_tiles, H, GROUP, CAUSAL: tl.constexpr, NUM_PROGS: tl.constexpr):
    """(start_m, off_bh, off_b, off_h, off_hkv) of a tile; causal: snake order, so that a program's tiles
    alternate long and short rows."""
    if CAUSAL:
        rnd = tile // NUM_PROGS
        pos = tile - rnd * NUM_PROGS
        e = tl.where(rnd % 2 == 1, rnd * NUM_PROGS + (NUM_PROGS - 1 - pos), tile)
        e = tl.where(e < num_tiles, e, tile)
        start_m = num_m - 1 - e % num_m
        off_bh = e // num_m
    else:
        start_m = tile % num_m
        off_bh = tile // num_m
    off_h = off_bh % H
    return start_m, off_bh, off_bh // H, off_h, off_h // GROUP


@triton.jit
def _load_q(q_ptr, tile, num_m, num_tiles, H, GROUP, S_q, stride_qb, stride_qh, stride_qm,
            BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, NUM_PROGS: tl.constexpr):
    start_m, off_bh, off_b, off_h, off_hkv = _coords(tile, num_m, num_tiles, H, GROUP, CAUSAL, NUM_PROGS)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    ok = (offs_m < S_q) & (tile < num_tiles)
    return tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=ok[:, None], other=0.0)


@triton.jit
def attention_fwd_persistent_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, q_ptr, o_ptr, stride_qb, stride_qh, stride_qm,
        B, H, S_q, S_kv, GROUP, qk_scale,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr, EVEN_KV: tl.constexpr, NUM_PROGS: tl.constexpr, FLATTEN: tl.constexpr,
        Q_PTR: tl.constexpr, O_PTR: tl.constexpr, QPRE: tl.constexpr, PV_SEP: tl.constexpr,
        Q_REG: tl.constexpr = False):
    num_m = tl.cdiv(S_q, BLOCK_M)
    num_tiles = num_m * B * H
    prog = tl.program_id(0)
    offs_n0 = tl.arange(0, BLOCK_N)
    if QPRE:
        q_next = _load_q(q_ptr, prog, num_m, num_tiles, H, GROUP, S_q, stride_qb, stride_qh, stride_qm,
                         BLOCK_M, HEAD_DIM, CAUSAL, NUM_PROGS)
    for tile in tl.range(prog, num_tiles, NUM_PROGS, flatten=FLATTEN):
        start_m, off_bh, off_b, off_h, off_hkv = _coords(tile, num_m, num_tiles, H, GROUP, CAUSAL, NUM_PROGS)
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        if QPRE:   # this tile's Q was loaded during the previous tile; start the next one's
            q = q_next
            q_next = _load_q(q_ptr, tile + NUM_PROGS, num_m, num_tiles, H, GROUP, S_q, stride_qb, stride_qh,
                             stride_qm, BLOCK_M, HEAD_DIM, CAUSAL, NUM_PROGS)
        elif Q_PTR:
            offs_d = tl.arange(0, HEAD_DIM)
            q_base = q_ptr + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
            q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=(offs_m < S_q)[:, None], other=0.0)
        else:
            q = q_desc.load([off_b, off_h, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)
        if Q_REG:   # an arithmetic result (times a runtime 1.0) is a register operand: no shared-memory copy of Q
            q = (q * (qk_scale / qk_scale)).to(q_ptr.dtype.element_ty)
        m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        if CAUSAL:
            hi = tl.minimum((start_m + 1) * BLOCK_M, S_kv)
        else:
            hi = S_kv
        for start_n in range(0, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = k_desc.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            qk = tl.dot(q, tl.trans(k))
            offs_n = start_n + offs_n0
            p, alpha, l_i, m_ij = _online_softmax(qk, m_i, l_i, offs_m, offs_n, offs_n < S_kv, qk_scale,
                                                  CAUSAL or not EVEN_KV, CAUSAL)
            v = v_desc.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            if PV_SEP:   # a use of the product inside the iteration (a register copy), so it is waited for here
                acc = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [acc], dtype=tl.float32, is_pure=True,
                                                pack=1)
            m_i = m_ij
        acc = acc / l_i[:, None]
        lse = (m_i + tl.math.log2(l_i)) / 1.4426950408889634
        tl.store(lse_ptr + off_bh.to(tl.int64) * S_q + offs_m, lse, mask=offs_m < S_q)
        if O_PTR:   # o_ptr shares q's strides
            offs_d = tl.arange(0, HEAD_DIM)
            o_base = o_ptr + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
            tl.store(o_base + offs_m[:, None] * stride_qm + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
                     mask=(offs_m < S_q)[:, None])
        else:
            o_desc.store([off_b, off_h, start_m * BLOCK_M, 0], acc.to(o_desc.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))


def persistent_forward(q, k, v, causal, bm, bn, warps, stages, maxnreg, flatten, q_ptr, o_ptr, progs_per_sm,
                       qpre=False, pv_sep=False, q_reg=False):
    from triton.tools.tensor_descriptor import TensorDescriptor
    b, h, s_q, d = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty((b, h, s_q), device=q.device, dtype=torch.float32)
    qd, od = (TensorDescriptor.from_tensor(t, [1, 1, bm, d]) for t in (q, o))
    kd, vd = (TensorDescriptor.from_tensor(t, [1, 1, bn, d]) for t in (k, v))
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    tiles = triton.cdiv(s_q, bm) * b * h
    nprog = min(tiles, sms * progs_per_sm)
    opts = dict(num_warps=warps, num_stages=stages)
    if maxnreg:
        opts["maxnreg"] = maxnreg
    attention_fwd_persistent_kernel[(nprog,)](
        qd, kd, vd, od, lse, q, o, q.stride(0), q.stride(1), q.stride(2),
        b, h, s_q, s_kv, h // h_kv, LOG2E / math.sqrt(d),
        HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, EVEN_KV=s_kv % bn == 0, NUM_PROGS=nprog,
        FLATTEN=flatten, Q_PTR=q_ptr, O_PTR=o_ptr, QPRE=qpre, PV_SEP=pv_sep, Q_REG=q_reg, **opts)
    return o, lse


# (bm, bn, warps, stages, maxnreg, flatten, q_ptr, o_ptr, programs per SM, Q prefetched a tile ahead,
#  PV waited in-iteration, Q a register operand)
VARIANTS = [
    (128, 64, 8, 2, 0, True, True, False, 1, False, False, True),
    (128, 64, 8, 2, 0, True, True, False, 1, False, True, True),
    (128, 64, 8, 2, 0, True, True, False, 1, True, False, True),
    (128, 64, 8, 3, 0, True, True, False, 1, False, False, True),
    (128, 128, 8, 2, 0, True, True, False, 1, False, False, True),
    (64, 64, 4, 2, 0, True, True, True, 2, False, False, True),
    (128, 64, 8, 2, 128, False, False, True, 2, False, False, False),
]
SHAPES = [(16, 32, 1024, False), (32, 32, 1024, False), (4, 32, 4096, False)]


# the default kernel on host-built descriptors with fixed tiles: (bm, bn, warps, stages, maxnreg)
TILES = [(128, 64, 8, 2, 128), (256, 64, 16, 2, 128), (256, 64, 16, 3, 128), (128, 64, 8, 3, None)]
TILE_SHAPES = [(16, 32, 1024, False), (16, 32, 1024, True), (32, 32, 1024, False), (32, 32, 1024, True),
               (8, 32, 2048, False), (8, 32, 2048, True), (4, 32, 4096, False), (4, 32, 4096, True),
               (1, 32, 16384, False)]


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "persist"
    if mode not in ("persist", "tiles"):
        print(f"usage: python experiments/probe_persist.py [persist|tiles], not {mode!r}", file=sys.stderr)
        return 2
    with open(os.path.join(os.environ.get("OUT", "."), "probe_persist.jsonl"), "a") as out:
        out.write(json.dumps(dict(env=dict(torch=torch.__version__, triton=triton.__version__,
                                           gpu=torch.cuda.get_device_name(),
                                           commit=os.environ.get("MLSYS_GIT_COMMIT", "")))) + "\n")
        for B, H, S, causal in (SHAPES if mode == "persist" else TILE_SHAPES):
            _probe_shape(out, mode, B, H, S, causal)
    return 0


def _probe_shape(out, mode, B, H, S, causal):
    """Every candidate of `mode` on one shape (d = 128), checked against SDPA FLASH, then timed."""
    from mlsyscalc.kernels import attention_fwd as fwd

    d = 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4.0 * B * H * S * S * d * (0.5 if causal else 1.0)
    ref = sdpa("flash")(q, k, v, causal)
    cands = {"sdpa_flash": lambda: sdpa("flash")(q, k, v, causal),
             "sdpa_cudnn": lambda: sdpa("cudnn")(q, k, v, causal),
             "default": lambda: fwd.attention_forward(q, k, v, causal)[0]}
    for bm, bn, wp, st, reg in TILES if mode == "tiles" else []:
        cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=wp, num_stages=st)
        if reg:
            cfg["maxnreg"] = reg
        cands[f"host {bm}x{bn} w{wp} s{st} r{reg}"] = (
            lambda cfg=cfg: fwd.attention_forward(q, k, v, causal, config=cfg, use_desc="host")[0])
    for var in VARIANTS if mode == "persist" else []:
        if causal and var[5]:
            continue   # the flattened loop needs a tile-invariant KV trip count
        cands["persist " + " ".join(map(str, var))] = (lambda var=var: persistent_forward(q, k, v, causal, *var)[0])
    for name, fn in cands.items():
        row = dict(shape=f"B{B}xH{H}xS{S}" + ("xcausal" if causal else ""), cand=name)
        try:
            o = fn()
            torch.cuda.synchronize()
            err = ((o.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            row["rel_err"] = err
            if err > 2e-2:
                row["error"] = "wrong result"
            else:
                ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
                row.update(ms=ms, tflops=flops / ms / 1e9)
        except Exception as e:   # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(row, flush=True)


if __name__ == "__main__":
    sys.exit(main())
