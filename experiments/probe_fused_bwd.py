"""Probe: the persistent backwards of the fused kernels (norm, dropout_add) under other tiles and grids.

    python experiments/probe_fused_bwd.py OUT.jsonl [--quick]

For RMSNorm/LayerNorm backward it launches kernels/norm.py's norm_bwd_kernel directly with BLOCK_ROWS
from a tile of E values (E = 2048 .. 16384), num_warps from rowwise.warps_for or twice that, and P from
two rules: `cur` (rowwise.programs_for: a program sums >= 16 rows, at most what fits on the card) and
`fill` (at least one program per SM while there are row blocks for them); for the dropout_add backward
(with a bias) the tile's rows come from dropout_add.BWD_TILE_ELEMENTS. Each row: the shape, the config,
the median time of the backward with its partial-sum launch (triton.testing.do_bench, L2 flushed), the
bytes calc/roofline/fused_ops.py counts and the kernel's registers and spills. The shipped choice is
whichever config the rows favour; this file only measures.
"""

from __future__ import annotations

import json
import sys

import torch
import triton
from triton.testing import do_bench

from mlsyscalc.calc.roofline.fused_ops import fused_count
from mlsyscalc.kernels import dropout_add as D
from mlsyscalc.kernels import norm as N
from mlsyscalc.kernels import rowwise as RW

TOKENS = (16, 256, 1024, 4096, 16384, 65536)
WIDTHS = (1024, 2048, 4096, 8192, 16384)
TILES = (2048, 4096, 8192, 16384)


def programs(rule: str, row_blocks: int, rows_per_block: int, warps: int) -> int:
    cur = RW.programs_for(row_blocks, rows_per_block, torch.device("cuda"), warps)
    if rule == "cur":
        return cur
    return max(cur, min(row_blocks, RW.num_sms(torch.device("cuda"))))


def norm_rows(layer: bool, tokens: int, width: int, out) -> None:
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w = torch.randn(width, device="cuda", dtype=torch.bfloat16)
    mean = x.float().mean(-1).contiguous()
    rstd = torch.rsqrt(x.float().var(-1, unbiased=False) + 1e-5).contiguous()
    dx = torch.empty_like(x)
    op = "layernorm_bwd" if layer else "rmsnorm_bwd"
    count = fused_count(op, tokens, width, "bfloat16")
    block_n = triton.next_power_of_2(width)
    for tile in TILES:
        block_rows = max(1, tile // block_n)
        base_warps = RW.warps_for(block_rows * block_n)
        for warps in sorted({base_warps, min(32, 2 * base_warps)}):
            row_blocks = triton.cdiv(tokens, block_rows)
            for rule in ("cur", "fill"):
                p = programs(rule, row_blocks, block_rows, warps)
                part = torch.empty((p, 2 * width if layer else width), device="cuda", dtype=torch.float32)

                def run():
                    k = N.norm_bwd_kernel[(p,)](dy, x, w, mean, rstd, dx, part, tokens, width, p, dy.stride(0),
                                                x.stride(0), dx.stride(0), part.stride(0), BLOCK_ROWS=block_rows,
                                                BLOCK_N=block_n, LAYER=layer, HAS_BIAS=layer, num_warps=warps)
                    RW.sum_partials(part, w.dtype)
                    return k

                k = run()
                ms = do_bench(run, warmup=10, rep=40, return_mode="median")
                nbytes = count.read_bytes + count.write_bytes
                row = {"op": op, "tokens": tokens, "width": width, "tile": tile, "block_rows": block_rows,
                       "warps": warps, "rule": rule, "programs": p, "us": ms * 1e3, "bytes": nbytes,
                       "gbps": nbytes / (ms * 1e-3) / 1e9, "regs": getattr(k, "n_regs", None),
                       "spills": getattr(k, "n_spills", None)}
                out.write(json.dumps(row) + "\n")
                out.flush()


def dropout_rows(tokens: int, width: int, out) -> None:
    dy = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    count = fused_count("dropout_add_bwd", tokens, width, "bfloat16")
    saved = D.BWD_TILE_ELEMENTS
    for tile in (1024, 2048, 4096, 8192, 16384):
        D.BWD_TILE_ELEMENTS = tile
        block_rows, _, warps = D.backward_tile(width)
        for rule in ("cur", "fill"):
            p = programs(rule, triton.cdiv(tokens, block_rows), block_rows, warps)
            fn = lambda: D.bias_dropout_add_backward(dy, 0.1, 1234, has_bias=True, programs=p)  # noqa: E731
            fn()
            ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
            nbytes = count.read_bytes + count.write_bytes
            out.write(json.dumps({"op": "dropout_add_bwd", "tokens": tokens, "width": width, "tile": tile,
                                  "block_rows": block_rows, "warps": warps, "rule": rule, "programs": p,
                                  "us": ms * 1e3, "bytes": nbytes, "gbps": nbytes / (ms * 1e-3) / 1e9}) + "\n")
            out.flush()
    D.BWD_TILE_ELEMENTS = saved


def graph_ms(fn) -> float:
    """do_bench median of fn captured in a CUDA graph (no Python launch cost in the timing)."""
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench(graph.replay, warmup=10, rep=40, return_mode="median")


def dropout_graph_rows(out) -> None:
    """The dropout_add backward at mid token counts and widths that are not powers of two, timed as graph
    replays: each BWD_TILE_ELEMENTS, with and without the partials' reduction launch."""
    saved = D.BWD_TILE_ELEMENTS
    for width in (3072, 5120, 12288, 4096):
        for tokens in (512, 2048, 8192):
            dy = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
            nbytes = sum(fused_count("dropout_add_bwd", tokens, width, "bfloat16").__dict__[k]
                         for k in ("read_bytes", "write_bytes"))
            for tile in (1024, 4096, 8192, 16384):
                D.BWD_TILE_ELEMENTS = tile
                ms = graph_ms(lambda: D.bias_dropout_add_backward(dy, 0.1, 1234, has_bias=True))
                ms_nb = graph_ms(lambda: D.bias_dropout_add_backward(dy, 0.1, 1234, has_bias=False))
                rows, groups, warps = D.backward_tile(width, tokens)
                out.write(json.dumps({"op": "dropout_add_bwd", "timing": "graph", "tokens": tokens, "width": width,
                                      "tile": tile, "block_rows": rows, "groups": groups, "warps": warps,
                                      "programs": D.bias_grad_programs(tokens, width, dy.device),
                                      "us": ms * 1e3, "us_no_bias": ms_nb * 1e3,
                                      "gbps": nbytes / (ms * 1e-3) / 1e9}) + "\n")
                out.flush()
    D.BWD_TILE_ELEMENTS = saved


def main() -> None:
    path, quick = sys.argv[1], "--quick" in sys.argv
    if "--dropout-graph" in sys.argv:
        with open(path, "a") as out:
            dropout_graph_rows(out)
        return
    tokens = (16, 4096, 65536) if quick else TOKENS
    with open(path, "a") as out:
        for width in WIDTHS:
            for t in tokens:
                if t * width * 2 > 2**31:
                    continue
                dropout_rows(t, width, out)
                for layer in (False, True):
                    norm_rows(layer, t, width, out)
                print("done width", width, flush=True)


if __name__ == "__main__":
    main()
