"""Probe: where the norms' slow shapes lose their time, and candidate fixes, timed on one GPU.

    python experiments/probe_norm_chunked.py OUT.jsonl [--budget S] [--quick]
                                             [--fwd-widths W,..] [--fwd-configs W,..] [--bwd-configs W,..]
                                             [--split-bwd W,..]

reports/fused/README.md (rows of bd4fa77 / 6c3e10a) has the norms off their priced line in two places: the
backwards of narrow rows at 256-16384 tokens (18-21% of copy bandwidth at 1024 x 4096-16384) and the LayerNorm
of 16384-wide rows (backward 25% of copy, forward 57%, where RMSNorm's forward of the same rows runs at 94%).
Per shape (bf16, widths 1024-16384, 256-65536 tokens), each candidate checked against an fp32 reference
(rel_err) and timed as a CUDA-graph replay (bench.harness.graphed) with triton.testing.do_bench (median, L2
flushed):

- `cur`: the shipped entry points of kernels/norm.py, each output copied into a buffer made before the
  capture, so these rows carry one extra copy per output: compare the shipped kernels through
  reports/fused/rows.jsonl instead;
- backward `P|P2.sS.SUM[.dbsep]`: the shipped row kernel (norm_bwd_kernel) with P = rowwise.programs_for's count
  or twice it, S row blocks in flight in its persistent loop (tl.range num_stages 1-3), its partial rows summed
  by rowwise.sum_partials as shipped (`sum`: 256 columns a program, width / 256 programs) or by a pipelined
  kernel of 32 columns x 128 partial rows a step (`sum32.128`); `dbsep` (LayerNorm): dw only in the row kernel,
  db as dy's column sums in a pass of its own (64 x 64 tiles, 3 in flight);
- forward, rows >= 8192 wide: `shiftR.C.W` in column chunks of C (R rows a program, W warps), the row read
  twice (sums of x - x[0] and its square, then the output): norm.norm_fwd_chunked_kernel as it ships since
  fe3d46a. The committed rows also have `chunkR.C.W`, the chunked kernel before fe3d46a, which read the row three
  times (mean, centred variance, output); `git show c8944b7~2:kernels/norm.py` has it.

Measures only; what ships is decided from the rows (kernels/norm.py and kernels/rowwise.py say which). The
`shift` and `split` candidates launch the shipped kernels (norm.norm_fwd_chunked_kernel, norm.norm_dwdb_kernel);
the committed rows were made with this file's own first copies of them.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from mlsyscalc.calc.roofline.fused_ops import fused_count
from mlsyscalc.kernels import norm as N
from mlsyscalc.kernels import rowwise as RW


@triton.jit
def _chunk(dy_ptr, x_ptr, w_ptr, rows64, in_rows, cols, Ncols, sdym, sxm, mean, rstd):
    """dy, w, xhat (fp32, zero where masked), the tile's mask and the columns' of one column chunk."""
    in_cols = cols < Ncols
    ok = in_rows[:, None] & in_cols[None, :]
    x = tl.load(x_ptr + rows64[:, None] * sxm + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + rows64[:, None] * sdym + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=in_cols, other=0.0).to(tl.float32)
    return dy, w, tl.where(ok, (x - mean[:, None]) * rstd[:, None], 0.0), ok, in_cols


@triton.jit
def bwd_chunked(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, part_ptr, M, Ncols, P, sdym, sxm, sdxm, spp,
                BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr, LAYER: tl.constexpr, HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    c0 = tl.arange(0, BLOCK_C)
    for c in range(0, Ncols, BLOCK_C):     # this program's partial row(s) start at zero
        cols = c + c0
        tl.store(part_ptr + pid * spp + cols, tl.zeros([BLOCK_C], tl.float32), mask=cols < Ncols)
        if HAS_BIAS:
            tl.store(part_ptr + pid * spp + Ncols + cols, tl.zeros([BLOCK_C], tl.float32), mask=cols < Ncols)
    tl.debug_barrier()
    n_blocks = tl.cdiv(M, BLOCK_ROWS)
    for block in range(pid, n_blocks, P):
        rows = block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        in_rows = rows < M
        rows64 = rows.to(tl.int64)
        rstd = tl.load(rstd_ptr + rows, mask=in_rows, other=0.0)
        mean = tl.load(mean_ptr + rows, mask=in_rows, other=0.0) if LAYER else rstd * 0.0
        a1 = tl.zeros([BLOCK_ROWS, BLOCK_C], tl.float32)
        a2 = tl.zeros([BLOCK_ROWS, BLOCK_C], tl.float32)
        for c in range(0, Ncols, BLOCK_C):
            cols = c + c0
            dy, w, xhat, ok, in_cols = _chunk(dy_ptr, x_ptr, w_ptr, rows64, in_rows, cols, Ncols, sdym, sxm, mean, rstd)
            g = dy * w[None, :]
            a1 += g * xhat
            if LAYER:
                a2 += g
        s1 = tl.sum(a1, axis=1) / Ncols
        s2 = tl.sum(a2, axis=1) / Ncols
        for c in range(0, Ncols, BLOCK_C):
            cols = c + c0
            dy, w, xhat, ok, in_cols = _chunk(dy_ptr, x_ptr, w_ptr, rows64, in_rows, cols, Ncols, sdym, sxm, mean, rstd)
            dx = (dy * w[None, :] - xhat * s1[:, None] - s2[:, None]) * rstd[:, None]
            tl.store(dx_ptr + rows64[:, None] * sdxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=ok)
            pw = part_ptr + pid * spp + cols
            tl.store(pw, tl.load(pw, mask=in_cols, other=0.0) + tl.sum(dy * xhat, axis=0), mask=in_cols)
            if HAS_BIAS:
                pb = part_ptr + pid * spp + Ncols + cols
                tl.store(pb, tl.load(pb, mask=in_cols, other=0.0) + tl.sum(dy, axis=0), mask=in_cols)
        tl.debug_barrier()


@triton.jit
def sum_partials_pipelined(part_ptr, out_ptr, P, Ncols, spp, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                           NUM_STAGES: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_cols = cols < Ncols
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for p0 in tl.range(0, P, BLOCK_P, num_stages=NUM_STAGES):
        r = p0 + tl.arange(0, BLOCK_P)
        acc += tl.load(part_ptr + r[:, None] * spp + cols[None, :], mask=(r[:, None] < P) & in_cols[None, :],
                       other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=in_cols)


@triton.jit
def column_sum(a_ptr, out_ptr, M, Ncols, sam, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr):
    """out[c] = sum over rows of a[:, c] in fp32 (the LayerNorm bias gradient as a pass of its own over dy)."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_cols = cols < Ncols
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for m0 in tl.range(0, M, BLOCK_M, num_stages=NUM_STAGES):
        r = m0 + tl.arange(0, BLOCK_M)
        acc += tl.load(a_ptr + r.to(tl.int64)[:, None] * sam + cols[None, :],
                       mask=(r[:, None] < M) & in_cols[None, :], other=0.0).to(tl.float32)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=in_cols)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def reference(x, w, b, dy, layer):
    xr = x.float().requires_grad_(True)
    wr = w.float().requires_grad_(True)
    br = b.float().requires_grad_(True) if b is not None else None
    if layer:
        y = torch.nn.functional.layer_norm(xr, (x.shape[1],), wr, br, 1e-5)
    else:
        y = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * wr
    y.backward(dy.float())
    return y.detach(), xr.grad, wr.grad, (br.grad if br is not None else None)


def run_env() -> dict:
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "timing": "do_bench median of a CUDA graph replay (bench.harness.graphed), L2 flushed"}


def inputs(layer: bool, tokens: int, width: int, dev: torch.device) -> tuple:
    """x, w, b (LayerNorm only), dy in bf16; the fp32 reference's y, dx, dw, db; the forward's mean, rstd."""
    x = torch.randn(tokens, width, device=dev, dtype=torch.bfloat16)
    w = (1 + 0.1 * torch.randn(width, device=dev)).to(torch.bfloat16)
    b = (0.1 * torch.randn(width, device=dev)).to(torch.bfloat16) if layer else None
    dy = torch.randn_like(x)
    refs = reference(x, w, b, dy, layer)
    if layer:
        _, mean, rstd = N.layer_norm_forward(x, w, b)
    else:
        _, rstd = N.rms_norm_forward(x, w)
        mean = rstd
    return x, w, b, dy, refs, mean, rstd


def main() -> None:

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--budget", type=float, default=420.0)
    ap.add_argument("--quick", action="store_true", help="two shapes (a check that it runs)")
    ap.add_argument("--fwd-widths", default="", help="only the forwards, at these comma-separated widths: the "
                    "whole-row kernel against column chunks that divide the row (non-power-of-two widths)")
    ap.add_argument("--fwd-configs", default="", help="only the whole-row forwards at these widths, each (rows a "
                    "program, num_warps) of 1-4 x 2-32 against the shipped choice")
    ap.add_argument("--bwd-configs", default="", help="only the backwards at these widths (up to 8192), each tile "
                    "of BWD_CANDIDATES against the shipped table")
    ap.add_argument("--split-bwd", default="", help="only the backwards at these widths: the shipped entry point "
                    "against a dx-only row kernel plus norm_dwdb_kernel")
    args = ap.parse_args()
    if args.fwd_widths:
        return fwd_widths([int(w) for w in args.fwd_widths.split(",")], args)
    if args.bwd_configs:
        return bwd_configs([int(w) for w in args.bwd_configs.split(",")], args)
    if args.fwd_configs:
        return fwd_configs([int(w) for w in args.fwd_configs.split(",")], args)
    if args.split_bwd:
        return split_bwd([int(w) for w in args.split_bwd.split(",")], args)
    t_end = time.time() + args.budget
    dev = torch.device("cuda")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "timing": "do_bench median of a CUDA graph replay (bench.harness.graphed), L2 flushed"}
    f = open(args.out, "a")

    def emit(row):
        row.update(env)
        f.write(json.dumps(row) + "\n")
        f.flush()

    def timed(base, ps, variant, fn, check, **extra):
        """Run fn once, check it, time its graph; a failure is a row too."""
        emit(time_call(fn, check, {**base, "pass": ps, "variant": variant, **extra}))

    narrow = [(w, t) for w in (1024, 2048, 4096, 8192) for t in (256, 1024, 4096, 16384, 65536)]
    wide = [(w, t) for w in (12288, 16384) for t in (256, 4096, 16384)]
    if args.quick:
        narrow, wide = [(1024, 4096)], [(16384, 256)]
    for layer in (False, True):
        name = "layernorm" if layer else "rmsnorm"
        for width, tokens in narrow + wide:
            if time.time() > t_end:
                emit({"stopped": "budget"})
                return
            x, w, b, dy, (y_ref, dx_ref, dw_ref, db_ref), mean, rstd = inputs(layer, tokens, width, dev)
            counts = {ps: fused_count(f"{name}_{ps}", tokens, width, "bfloat16") for ps in ("fwd", "bwd")}
            base = {"op": name, "width": width, "tokens": tokens,
                    **{f"{ps}_bytes": c.read_bytes + c.write_bytes for ps, c in counts.items()}}
            eps = 1e-5 if layer else 1e-6
            cols = 2 * width if layer else width
            # forward: shipped, and the column-chunked candidates for wide rows
            yv = torch.empty_like(x)
            mv = torch.empty(tokens, device=dev, dtype=torch.float32)
            rv = torch.empty(tokens, device=dev, dtype=torch.float32)
            def fwd_check():
                return rel(yv, y_ref)

            timed(base, "fwd", "cur", lambda: yv.copy_((N.layer_norm_forward(x, w, b) if layer
                                                          else N.rms_norm_forward(x, w))[0]), fwd_check)
            if width >= 8192:
                for kern, tag in ((N.norm_fwd_chunked_kernel, "shift"),):
                    for r, c, wp in ((1, 4096, 8), (1, 4096, 16), (2, 4096, 16), (1, 2048, 8)):
                        def fc(kern=kern, r=r, c=c, wp=wp):
                            kern[(triton.cdiv(tokens, r),)](x, w, b if layer else w, yv, mv, rv, tokens, width,
                                                            x.stride(0), yv.stride(0), eps, BLOCK_ROWS=r, BLOCK_C=c,
                                                            LAYER=layer, HAS_BIAS=layer, num_warps=wp)
                        timed(base, "fwd", f"{tag}{r}.{c}.{wp}", fc, fwd_check)
            # backward: shipped entry point, then the row kernel with stages / programs / bias variants
            dxv = torch.empty_like(x)
            sums = torch.empty(cols, device=dev, dtype=torch.float32)

            def bwd_check():
                e = max(rel(dxv, dx_ref), rel(sums[:width], dw_ref))
                return max(e, rel(sums[width:], db_ref)) if layer else e

            def cur():
                out = (N.layer_norm_backward(dy, x, w, mean, rstd, has_bias=True) if layer
                       else N.rms_norm_backward(dy, x, w, rstd))
                dxv.copy_(out[0])
                sums[:width].copy_(out[1])
                if layer:
                    sums[width:].copy_(out[2])
            timed(base, "bwd", "cur", cur, bwd_check)
            br, bn, warps = N.backward_tile(width, layer)
            p_cur = N.backward_programs(tokens, width, dev, None, layer)
            blocks = triton.cdiv(tokens, br)
            for prule, p in (("P", p_cur), ("P2", min(blocks, 2 * p_cur))):
                for stages in (1, 2, 3):
                    for sumk in ("sum", "sum32.128"):
                        for bias in ((True, False) if layer else (False,)):
                            part = torch.empty((p, cols if bias else width), device=dev, dtype=torch.float32)

                            def run(p=p, stages=stages, sumk=sumk, bias=bias, part=part):
                                N.norm_bwd_kernel[(p,)](dy, x, w, mean, rstd, dxv, part, tokens, width, p,
                                                        dy.stride(0), x.stride(0), dxv.stride(0), part.stride(0),
                                                        BLOCK_ROWS=br, BLOCK_N=bn, LAYER=layer, HAS_BIAS=bias,
                                                        NUM_STAGES=stages, num_warps=warps)
                                n = part.shape[1]
                                if sumk == "sum":
                                    sums[:n].copy_(RW.sum_partials(part, torch.float32))
                                else:
                                    sum_partials_pipelined[(triton.cdiv(n, 32),)](part, sums, p, n, part.stride(0),
                                                                                  BLOCK_P=128, BLOCK_N=32,
                                                                                  NUM_STAGES=2, num_warps=4)
                                if layer and not bias:   # the bias gradient as its own pass over dy
                                    column_sum[(triton.cdiv(width, 64),)](dy, sums[width:], tokens, width,
                                                                          dy.stride(0), BLOCK_M=64, BLOCK_N=64,
                                                                          NUM_STAGES=3, num_warps=4)
                            tag = f"{prule}.s{stages}.{sumk}" + ("" if bias or not layer else ".dbsep")
                            timed(base, "bwd", tag, run, bwd_check, programs=p, tile=[br, bn, warps])
    f.close()


def fwd_case(layer: bool, tokens: int, width: int, dev: torch.device, env: dict) -> tuple:
    """A forward's inputs (the bias pointer is the weight's for RMSNorm: the kernels take one either way), its
    output buffers, eps, the fp32 reference's y and the row's base fields."""
    name = "layernorm" if layer else "rmsnorm"
    x, w, b, _, (y_ref, *_), _, _ = inputs(layer, tokens, width, dev)
    y = torch.empty_like(x)
    m = torch.empty(tokens, device=dev, dtype=torch.float32)
    r = torch.empty(tokens, device=dev, dtype=torch.float32)
    nbytes = fused_count(f"{name}_fwd", tokens, width, "bfloat16")
    base = {"op": name, "pass": "fwd", "width": width, "tokens": tokens,
            "fwd_bytes": nbytes.read_bytes + nbytes.write_bytes, **env}
    return x, w, b if layer else w, y, m, r, 1e-5 if layer else 1e-6, y_ref, base


def time_forward(fn, y: torch.Tensor, y_ref: torch.Tensor, row: dict) -> dict:
    """Run fn once, check y, time fn's CUDA graph: the row with us, rel_err and graph, or with the error."""
    return time_call(fn, lambda: rel(y, y_ref), row)


def time_call(fn, check, row: dict) -> dict:
    """Run fn once, check() its outputs, time fn's CUDA graph: the row with us, rel_err and graph, or the error."""
    from mlsyscalc.bench.harness import graphed

    try:
        fn()
        torch.cuda.synchronize()
        err = check()
        replay, how = graphed(fn)
        us = do_bench(replay, warmup=10, rep=50, return_mode="median") * 1e3
        return {**row, "us": us, "rel_err": err, "graph": how}
    except Exception as exc:  # noqa: BLE001 - a config that does not compile or check is a row too
        return {**row, "error": repr(exc)[:300]}


def fwd_widths(widths: list[int], args) -> None:
    """The forwards of rows whose width is not a power of two: norm_fwd_kernel (the row padded to a power of two
    in registers) against norm.norm_fwd_chunked_kernel with chunks of 512-4096 columns, timed as CUDA-graph replays."""

    dev = torch.device("cuda")
    env = run_env()
    with open(args.out, "a") as f:
        for layer in (True, False):
            for width in widths:
                for tokens in (16, 256, 4096, 16384):
                    x, w, b, y, m, r, eps, y_ref, base = fwd_case(layer, tokens, width, dev, env)
                    br, bn = RW.row_tile(width)
                    cands = [("row", lambda br=br, bn=bn: N.norm_fwd_kernel[(triton.cdiv(tokens, br),)](
                        x, w, b, y, m, r, tokens, width, x.stride(0), y.stride(0), eps, BLOCK_ROWS=br, BLOCK_N=bn,
                        LAYER=layer, HAS_BIAS=layer, num_warps=RW.warps_for(br * bn)))]
                    for c in (512, 1024, 2048, 4096):
                        if width % c and c > 512:
                            continue
                        for rows_, wp in ((1, 4), (1, 8), (2, 8)):
                            cands.append((f"chunk{rows_}.{c}.{wp}", lambda c=c, rows_=rows_, wp=wp: N.norm_fwd_chunked_kernel[
                                (triton.cdiv(tokens, rows_),)](x, w, b, y, m, r, tokens, width, x.stride(0), y.stride(0),
                                                               eps, BLOCK_ROWS=rows_, BLOCK_C=c, LAYER=layer,
                                                               HAS_BIAS=layer, num_warps=wp)))
                    for tag, fn in cands:
                        f.write(json.dumps(time_forward(fn, y, y_ref, {**base, "variant": tag})) + "\n")


def fwd_configs(widths: list[int], args) -> None:
    """norm_fwd_kernel's launch at each width: rows a program (1, 2, 4) x num_warps (2-32), against the shipped
    row_tile / warps_for choice (`ship`), timed as CUDA-graph replays."""

    dev = torch.device("cuda")
    env = run_env()
    t_end = time.time() + args.budget
    with open(args.out, "a") as f:
        for width in widths:
            for layer in (True, False):
                for tokens in (4096, 32768):
                    if time.time() > t_end:
                        f.write(json.dumps({"stopped": "budget"}) + "\n")
                        return
                    x, w, b, y, m, r, eps, y_ref, base = fwd_case(layer, tokens, width, dev, env)
                    br0, bn = RW.row_tile(width)
                    configs = [("ship", br0, RW.warps_for(br0 * bn))]
                    configs += [(f"r{br}.w{wp}", br, wp) for br in (1, 2, 4) for wp in (2, 4, 8, 16, 32)
                                if 32 * wp <= br * bn]
                    for tag, br, wp in configs:
                        def fn(br=br, wp=wp):
                            N.norm_fwd_kernel[(triton.cdiv(tokens, br),)](
                                x, w, b, y, m, r, tokens, width, x.stride(0), y.stride(0), eps, BLOCK_ROWS=br,
                                BLOCK_N=bn, LAYER=layer, HAS_BIAS=layer, num_warps=wp)
                        f.write(json.dumps(time_forward(fn, y, y_ref, {**base, "variant": tag})) + "\n")


BWD_CANDIDATES = ((2048, 8, 3), (4096, 8, 3), (4096, 16, 3), (8192, 16, 3), (8192, 32, 1), (16384, 32, 1))


def bwd_configs(widths: list[int], args) -> None:
    """The backwards through the shipped entry points with BWD_TILES set to each (values a program holds a step,
    num_warps, row blocks in flight) of BWD_CANDIDATES at the width (`ship`: the shipped table); outputs copied into
    buffers made before the capture (one extra copy an output, the same for every candidate)."""
    dev = torch.device("cuda")
    env = run_env()
    t_end = time.time() + args.budget
    shipped = dict(N.BWD_TILES)
    with open(args.out, "a") as f:
        for width in widths:
            for layer in (False, True):
                name = "layernorm" if layer else "rmsnorm"
                for tokens in (4096, 32768):
                    if time.time() > t_end:
                        f.write(json.dumps({"stopped": "budget"}) + "\n")
                        return
                    x, w, b, dy, (_, dx_ref, dw_ref, _), mean, rstd = inputs(layer, tokens, width, dev)
                    dxv, dwv = torch.empty_like(x), torch.empty(width, device=dev, dtype=torch.float32)
                    nbytes = fused_count(f"{name}_bwd", tokens, width, "bfloat16")
                    base = {"op": name, "pass": "bwd", "width": width, "tokens": tokens,
                            "bwd_bytes": nbytes.read_bytes + nbytes.write_bytes, **env}

                    def run():
                        out = (N.layer_norm_backward(dy, x, w, mean, rstd, has_bias=True) if layer
                               else N.rms_norm_backward(dy, x, w, rstd))
                        dxv.copy_(out[0])
                        dwv.copy_(out[1])

                    def check():
                        return max(rel(dxv, dx_ref), rel(dwv, dw_ref))
                    for tag, tile in (("ship", None), *((f"e{e}.w{wp}.s{st}", (e, wp, st)) for e, wp, st in
                                                        BWD_CANDIDATES if e >= triton.next_power_of_2(width) // 4)):
                        N.BWD_TILES = shipped if tile is None else {layer: ((width, *tile),), not layer: shipped[not layer]}
                        row = {**base, "variant": tag, "tile": list(N.backward_tile(width, layer)),
                               "stages": N.backward_stages(width, layer)}
                        f.write(json.dumps(time_call(run, check, row)) + "\n")
                    N.BWD_TILES = shipped


def split_bwd(widths: list[int], args) -> None:
    """The backward of wide rows: the shipped entry point (as it runs, outputs allocated inside) against the row
    kernel computing dx alone (3 row blocks in flight) followed by norm.norm_dwdb_kernel in a few tiles."""
    dev = torch.device("cuda")
    env = run_env()
    with open(args.out, "a") as f:
        for layer in (True, False):
            name = "layernorm" if layer else "rmsnorm"
            for width in widths:
                for tokens in (256, 4096, 16384):
                    x, w, b, dy, (_, dx_ref, dw_ref, db_ref), mean, rstd = inputs(layer, tokens, width, dev)
                    nbytes = fused_count(f"{name}_bwd", tokens, width, "bfloat16")
                    base = {"op": name, "pass": "bwd", "width": width, "tokens": tokens,
                            "bwd_bytes": nbytes.read_bytes + nbytes.write_bytes, **env}
                    out: dict = {}

                    def ship():
                        out["r"] = (N.layer_norm_backward(dy, x, w, mean, rstd, has_bias=True) if layer
                                    else N.rms_norm_backward(dy, x, w, rstd))

                    def ship_err():
                        r = out["r"]
                        e = max(rel(r[0], dx_ref), rel(r[1], dw_ref))
                        return max(e, rel(r[2], db_ref)) if layer else e

                    cands = [("ship", ship, ship_err)]
                    br, bn, warps = N.backward_tile(width, layer)
                    p = N.backward_programs(tokens, width, dev, None, layer)
                    dx = torch.empty_like(x)
                    dwv = torch.empty(width, device=dev, dtype=torch.float32)
                    dbv = torch.empty(width, device=dev, dtype=torch.float32)
                    part = torch.empty((p, width), device=dev, dtype=torch.float32)

                    def split_err():
                        e = max(rel(dx, dx_ref), rel(dwv, dw_ref))
                        return max(e, rel(dbv, db_ref)) if layer else e
                    for bm, bnc, st, wp in ((32, 64, 3, 4), (64, 64, 3, 8), (32, 128, 2, 8), (64, 32, 3, 4)):
                        def split(bm=bm, bnc=bnc, st=st, wp=wp):
                            N.norm_bwd_kernel[(p,)](dy, x, w, mean, rstd, dx, part, tokens, width, p, dy.stride(0),
                                                    x.stride(0), dx.stride(0), part.stride(0), BLOCK_ROWS=br,
                                                    BLOCK_N=bn, LAYER=layer, HAS_BIAS=False, NUM_STAGES=3,
                                                    HAS_DW=False, num_warps=warps)
                            N.norm_dwdb_kernel[(triton.cdiv(width, bnc),)](dy, x, mean, rstd, dwv, dbv, tokens, width,
                                                                     dy.stride(0), x.stride(0), BLOCK_M=bm,
                                                                     BLOCK_N=bnc, LAYER=layer, HAS_BIAS=layer,
                                                                     NUM_STAGES=st, num_warps=wp)
                        cands.append((f"split{bm}.{bnc}.{st}.{wp}", split, split_err))
                    for tag, fn, check in cands:
                        f.write(json.dumps(time_call(fn, check, {**base, "variant": tag})) + "\n")


if __name__ == "__main__":
    main()
