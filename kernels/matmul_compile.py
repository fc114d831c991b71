"""Compile the split-K kernels for Hopper (sm_90) without a GPU: triton 3.6 lowers ttir -> ttgir ->
llir -> ptx and runs its bundled ptxas to a cubin, none of which needs a driver. Used by CI to
check that the kernels build for the card the benchmarks run on, and that the PTX uses wgmma
(`wgmma.mma_async`) and TMA (`cp.async.bulk.tensor`) where it should.

Run as `python -m mlsyscalc.kernels.matmul_compile` (prints one JSON line per kernel); needs
TRITON_INTERPRET unset, since under the interpreter `@triton.jit` gives no compilable function.
"""

from __future__ import annotations

import json

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import matmul_splitk as sk

HOPPER = GPUTarget("cuda", 90, 32)
_TYPES = {"bfloat16": "bf16", "fp8": "fp8e4nv", "float32": "fp32", "int8": "i8"}


def _signature(fn, types: dict, consts: dict) -> dict:
    return {name: "constexpr" if name in consts else types[name] for name in fn.arg_names}


def compile_for_hopper(fn, types: dict, consts: dict, aligned: tuple = (), **options):
    """triton.compile one specialisation of `fn` for sm_90 (no GPU needed): `types` for the runtime
    parameters, `consts` for the constexprs, `options` e.g. num_warps / num_stages. `aligned` names the
    parameters to treat as the JIT does a 16-byte-aligned pointer or an integer divisible by 16 (on a
    GPU it specialises each launch so; without it, loads over such strides are not vectorised)."""
    consts = {**{p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}, **consts}
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in aligned if name in fn.arg_names}
    return triton.compile(ASTSource(fn, _signature(fn, types, consts), consts, attrs), target=HOPPER, options=options)


def _counts(compiled, **about) -> dict:
    ptx = compiled.asm["ptx"]
    return dict(about, cubin_bytes=len(compiled.asm["cubin"]), wgmma=ptx.count("wgmma.mma_async"),
                tma_loads=ptx.count("cp.async.bulk.tensor"), shared_bytes=compiled.metadata.shared)


def partial(dtype: str, block: tuple[int, int, int], split: int, use_tma: bool, warps: int = 4,
            stages: int = 4) -> dict:
    """One `_splitk_partial_kernel` specialisation, A row-major and B = W.T (nn.Linear) as in the bench."""
    bm, bn, bk = block
    elt, int8 = _TYPES[dtype], dtype == "int8"
    out = ("fp32" if dtype == "float32" else "bf16") if split == 1 else ("i32" if int8 else "fp32")
    ptrs = {n: "i32" for n in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                               "stride_os", "stride_om", "stride_on")}
    types = dict(ptrs, a_in=f"tensordesc<{elt}[{bm},{bk}]>" if use_tma else f"*{elt}",
                 b_in=f"tensordesc<{elt}[{bn},{bk}]>" if use_tma else f"*{elt}", out_ptr=f"*{out}",
                 a_scale_ptr="*fp32", b_scale_ptr="*fp32", bias_ptr="*bf16")
    consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=split, USE_TMA=use_tma, A_T=False,
                  B_NK=use_tma, SCALE=1 if dtype in ("fp8", "int8") else 0, HAS_BIAS=split == 1, ACT=1, INT8=int8)
    kernel = compile_for_hopper(sk._splitk_partial_kernel, types, consts, num_warps=warps, num_stages=stages)
    return _counts(kernel, kernel="partial", dtype=dtype, block=list(block), split=split, tma=use_tma)


def reduce(split: int, int8: bool = False) -> dict:
    fn = sk._splitk_reduce_kernel
    types = dict(ws_ptr="*i32" if int8 else "*fp32", c_ptr="*bf16", a_scale_ptr="*fp32", b_scale_ptr="*fp32",
                 bias_ptr="*bf16", M="i32", N="i32", stride_ws="i32", stride_cm="i32", stride_cn="i32")
    consts = dict(BLOCK_M=32, BLOCK_N=128, SPLIT_K=split, SCALE=2, HAS_BIAS=True, ACT=2, INT8=int8)
    kernel = compile_for_hopper(fn, types, consts, num_warps=4)
    return _counts(kernel, kernel="reduce", split=split, int8=int8)


def check() -> list[dict]:
    """A spread of the autotune space: each dtype family, TMA and pointer loads, split 1 and > 1."""
    return [partial("bfloat16", (128, 128, 64), 2, True), partial("bfloat16", (64, 128, 64), 1, True),
            partial("bfloat16", (128, 128, 64), 3, False, warps=8), partial("fp8", (128, 128, 128), 4, True, warps=8),
            partial("float32", (64, 128, 32), 2, True, stages=3), partial("int8", (64, 64, 128), 2, True),
            reduce(2), reduce(4, int8=True)]


if __name__ == "__main__":
    for result in check():
        print(json.dumps(result))
