"""Compile the fused kernels (norm, glu, rotary, dropout_add, cross_entropy) for Hopper (sm_90) without a GPU.

One bf16 specialisation of each kernel at the widths the benchmark sweeps use, built by triton's own
compiler and bundled ptxas (matmul_compile.compile_for_hopper); the report counts the 16-byte vector
loads and stores in the PTX (a software-pipelined loop loads through 16-byte cp.async copies to shared memory,
counted as vector loads too). A build check, not a speed. Run as `python -m mlsyscalc.kernels.fused_compile`
with TRITON_INTERPRET unset (one JSON line per kernel); a CPU test does.
"""

from __future__ import annotations

import json
import re

import triton

from . import cross_entropy, dropout_add, glu, norm, rotary
from .matmul_compile import compile_for_hopper
from .rowwise import SUM_COLUMNS, SUM_ROWS, SUM_STAGES, col_tile, row_tile, sum_partials_kernel, warps_for

BF16, F32, I32, I64 = "*bf16", "*fp32", "i32", "*i64"
WIDTHS = ("N", "V", "H", "HALF", "G")   # width arguments, multiples of 16 at every swept size


def _norm(width: int, layer: bool, backward: bool) -> tuple:
    block_rows, block_n = row_tile(width)
    consts = dict(BLOCK_ROWS=block_rows, BLOCK_N=block_n, LAYER=layer, HAS_BIAS=layer)
    if backward:
        block_rows, block_n, warps = norm.backward_tile(width, layer)
        split = layer and width > norm.CHUNKED_WIDTH   # dx alone (_norm_dwdb sums dw and db)
        consts.update(BLOCK_ROWS=block_rows, BLOCK_N=block_n, NUM_STAGES=norm.backward_stages(width, layer),
                      HAS_BIAS=layer and not split, HAS_DW=not split)
        types = dict(dy_ptr=BF16, x_ptr=BF16, w_ptr=BF16, mean_ptr=F32, rstd_ptr=F32, dx_ptr=BF16, part_ptr=F32,
                     M=I32, N=I32, P=I32, stride_dym=I32, stride_xm=I32, stride_dxm=I32, stride_pp=I32)
        return norm.norm_bwd_kernel, types, consts, warps
    types = dict(x_ptr=BF16, w_ptr=BF16, b_ptr=BF16, y_ptr=BF16, mean_ptr=F32, rstd_ptr=F32, M=I32, N=I32,
                 stride_xm=I32, stride_ym=I32, eps="fp32")
    if layer and width > norm.CHUNKED_WIDTH:
        block_rows, block_c, warps = norm.CHUNKED_FWD_TILE
        return norm.norm_fwd_chunked_kernel, types, dict(BLOCK_ROWS=block_rows, BLOCK_C=block_c, LAYER=layer,
                                                         HAS_BIAS=layer), warps
    return norm.norm_fwd_kernel, types, consts, norm.forward_warps(block_rows, block_n, layer)


def _norm_dwdb(layer: bool) -> tuple:
    block_m, block_n, stages, warps = norm.DWDB_TILE
    types = dict(dy_ptr=BF16, x_ptr=BF16, mean_ptr=F32, rstd_ptr=F32, dw_ptr=BF16, db_ptr=BF16, M=I32, N=I32,
                 stride_dym=I32, stride_xm=I32)
    return norm.norm_dwdb_kernel, types, dict(BLOCK_M=block_m, BLOCK_N=block_n, LAYER=layer, HAS_BIAS=layer,
                                              NUM_STAGES=stages), warps


def _glu(width: int, act: int, backward: bool) -> tuple:
    block_c = col_tile(width)
    if backward:
        types = dict(dy_ptr=BF16, gate_ptr=BF16, up_ptr=BF16, dg_ptr=BF16, du_ptr=BF16, N=I32, stride_dym=I32,
                     stride_gm=I32, stride_um=I32, stride_dgm=I32, stride_dum=I32)
        return glu.glu_bwd_kernel, types, dict(BLOCK_C=block_c, ACT=act), warps_for(block_c)
    types = dict(gate_ptr=BF16, up_ptr=BF16, y_ptr=BF16, N=I32, stride_gm=I32, stride_um=I32, stride_ym=I32)
    return glu.glu_fwd_kernel, types, dict(BLOCK_C=block_c, ACT=act), warps_for(block_c)


def _rotary(heads: int, head_dim: int) -> tuple:
    block_d = head_dim // 2
    block_h = min(heads, rotary.TILE_ELEMENTS // block_d)
    types = dict(x_ptr=BF16, pos_ptr=I64, cos_ptr=F32, sin_ptr=F32, y_ptr=BF16, H=I32, HALF=I32, stride_xt=I32,
                 stride_xh=I32, stride_yt=I32, stride_yh=I32, stride_cp=I32)
    return rotary.rotary_kernel, types, dict(BLOCK_H=block_h, BLOCK_D=block_d, SIGN=1), warps_for(2 * block_h * block_d)


def _dropout(width: int, backward: bool) -> tuple:
    groups = col_tile(width) // dropout_add.LANES
    consts = dict(GROUPS=groups, HAS_BIAS=True)
    drop = dict(seed=I32, threshold=I32, scale="fp32")
    if backward:
        block_rows, groups, warps = dropout_add.backward_tile(width)
        consts.update(BLOCK_ROWS=block_rows, GROUPS=groups)
        types = dict(dy_ptr=BF16, dx_ptr=BF16, part_ptr=F32, M=I32, N=I32, G=I32, P=I32, stride_dym=I32,
                     stride_dxm=I32, stride_pp=I32, **drop)
        return dropout_add.dropout_add_bwd_kernel, types, consts, warps
    types = dict(x_ptr=BF16, bias_ptr=BF16, res_ptr=BF16, out_ptr=BF16, N=I32, G=I32, stride_xm=I32, stride_rm=I32,
                 stride_om=I32, **drop)
    return dropout_add.dropout_add_fwd_kernel, types, consts, warps_for(groups * dropout_add.LANES)


def _cross_entropy(vocab: int) -> tuple:
    block_v = min(triton.next_power_of_2(vocab), cross_entropy.BLOCK_ELEMENTS)
    types = dict(logits_ptr=BF16, target_ptr=I64, loss_ptr=F32, n_valid_ptr=I64, V=I32, stride_lm=I32,
                 ignore_index=I32)
    return cross_entropy.cross_entropy_kernel, types, dict(BLOCK_V=block_v), warps_for(block_v)


def _sum_partials() -> tuple:
    types = dict(part_ptr=F32, out_ptr=BF16, P=I32, N=I32, stride_pp=I32)
    return sum_partials_kernel, types, dict(BLOCK_P=SUM_ROWS, BLOCK_N=SUM_COLUMNS, NUM_STAGES=SUM_STAGES), 4


SPECIALISATIONS = {   # name -> (kernel, argument types, constexprs, num_warps)
    "rmsnorm_fwd_4096": _norm(4096, False, False), "rmsnorm_bwd_1024": _norm(1024, False, True),
    "rmsnorm_bwd_16384": _norm(16384, False, True), "layernorm_fwd_16384": _norm(16384, True, False),
    "layernorm_bwd_16384": _norm(16384, True, True), "layernorm_dwdb_16384": _norm_dwdb(True),
    "layernorm_fwd_4096": _norm(4096, True, False),
    "swiglu_fwd_11008": _glu(11008, 0, False), "geglu_bwd_11008": _glu(11008, 1, True),
    "rotary_fwd_32x128": _rotary(32, 128),
    "dropout_add_fwd_4096": _dropout(4096, False), "dropout_add_bwd_4096": _dropout(4096, True),
    "cross_entropy_128256": _cross_entropy(128256), "sum_partials": _sum_partials(),
}


def check() -> list[dict]:
    """Build each specialisation, pointers, strides and widths taken as the JIT finds them at these sizes:
    16-byte aligned pointers, integers divisible by 16 (it specialises every launch so)."""
    out = []
    for name, (fn, types, consts, warps) in SPECIALISATIONS.items():
        aligned = tuple(k for k, v in types.items() if v.startswith("*") or k.startswith("stride") or k in WIDTHS)
        ptx = compile_for_hopper(fn, types, consts, aligned=aligned, num_warps=warps).asm["ptx"]
        copies16 = len(re.findall(r"cp\.async\.c[ag]\.shared\.global[^\n]*0x10", ptx))
        out.append(dict(kernel=name, num_warps=warps, v4_loads=ptx.count("ld.global.v4") + copies16,
                        v4_stores=ptx.count("st.global.v4"), loads=ptx.count("ld.global") + copies16,
                        async_copies_16b=copies16))
    return out


if __name__ == "__main__":
    for result in check():
        print(json.dumps(result))
