"""Quantize/dequantize and quantised matmuls: CPU interpreter at small odd shapes, GPU at real ones."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from mlsyscalc.bench.harness import check_close
from mlsyscalc.cli.bench_kernels import QUANT_KINDS
from mlsyscalc.kernels import quant as Q
from mlsyscalc.bench.cases import quant as QB

from .sm90 import needs_ptxas, run_uninterpreted

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")


@pytest.mark.parametrize("mode,group", [("int8", None), ("int8", 64), ("int4", 128), ("int4", 32)])
def test_quantize_matches_torch_and_round_trips(mode, group):
    x = torch.randn(37, 256, device=DEV, dtype=torch.float16)
    q, s = Q.quantize(x, mode, group)
    qr, sr = Q.quantize_ref(x, mode, group)
    assert torch.allclose(s, sr, rtol=1e-6)
    # identical up to a rare rounding tie flipped by x*(1/s) vs x/s
    assert (q.view(torch.uint8) != qr.view(torch.uint8)).float().mean() < 2e-3
    err = (Q.dequantize_ref(q, s, mode, group) - x.float()).norm() / x.float().norm()
    # absmax rounding error of a Gaussian: about 1/(2*sqrt(3)) of a step, far below one step
    assert err < (0.02 if mode == "int8" else 0.2)
    deq = Q.dequantize(q, s, mode, group, out_dtype=torch.float32)
    assert torch.allclose(deq, Q.dequantize_ref(q, s, mode, group), atol=1e-6)


def test_int4_packing_layout():
    x = torch.tensor([[1.0, -7.0, 7.0, 0.0]], device=DEV)  # scale = 1: q = x
    q, s = Q.quantize(x, "int4", 4)
    assert s.item() == 1.0
    assert q.tolist() == [[(1 + 8) | ((-7 + 8) << 4), (7 + 8) | (0 + 8) << 4]]


def test_pack_halves_layout_and_dequantize_reads_it():
    q = torch.tensor([[(1 + 8) | ((-7 + 8) << 4), (7 + 8) | (0 + 8) << 4]], dtype=torch.uint8, device=DEV)  # k: 1 -7 7 0
    assert Q.pack_halves(q, 4).tolist() == [[9 | (15 << 4), 1 | (8 << 4)]]   # byte j: k = j low, k = 2 + j high
    q, s = Q.quantize(torch.randn(24, 256, device=DEV), "int4", 64, torch.float32)
    want = Q.dequantize_ref(q, s, "int4", 64)
    assert torch.equal(Q.dequantize(Q.pack_halves(q, 64), s, "int4", 64, torch.float32, halves=True), want)
    assert not torch.equal(Q.dequantize(q, s, "int4", 64, torch.float32, halves=True), want)   # layouts differ
    q, s = Q.quantize(torch.randn(40, 384, device=DEV), "int4", 128, torch.float32)   # 3 groups: one program half empty
    assert torch.equal(Q.dequantize(Q.pack_halves(q, 128), s, "int4", 128, torch.float32, halves=True),
                       Q.dequantize_ref(q, s, "int4", 128))


def test_weight_only_path_by_rows():
    f16 = torch.float16
    assert [Q.weight_only_path(m, 8, f16) for m in (1, 16, 17, Q.PREFILL_M[8] - 1, Q.PREFILL_M[8], 8192)] == \
        ["gemv", "gemv", "tiled", "tiled", "dequant", "dequant"]
    assert [Q.weight_only_path(m, 4, f16) for m in (1, 16, 17, 8192)] == ["gemv", "gemv", "dequant", "dequant"]
    assert Q.weight_only_path(1, 4, torch.float32) == "dequant"   # the GEMV converts to 16-bit floats only


@pytest.mark.parametrize("bits,group,path,M", [
    (bits, group, path, M)
    for bits, group, path in [(8, None, "gemv"), (8, None, "tiled"), (8, None, "dequant"),
                              (4, 128, "gemv"), (4, 64, "dequant"), (4, 32, None)]
    for M in (1, 5, 20) if not (path == "gemv" and M > Q.GEMV_MAX_M)])  # the GEMV takes up to 16 rows
def test_weight_only_matmul_every_path(bits, group, path, M):
    K, N = 256, 40
    x = torch.randn(M, K, device=DEV, dtype=torch.float16)
    q, s = Q.quantize(torch.randn(N, K, device=DEV), "int8" if bits == 8 else "int4", group, torch.float16)
    qk = Q.pack_halves(q, group) if bits == 4 else q
    y = Q.weight_only_matmul(x, qk, s, bits, group, path=path)
    assert y.shape == (M, N) and y.dtype == torch.float16
    check = check_close(y, Q.weight_only_matmul_ref(x, q, s, bits, group), "float16")
    assert check.ok, check.message


@pytest.mark.parametrize("split_k", [1, 2])
def test_w8a16_tiled_kernel_split_k(split_k):
    x = torch.randn(20, 320, device=DEV, dtype=torch.float16)   # K = 320: the last K tile of a slice is partial
    q, s = Q.quantize(torch.randn(24, 320, device=DEV), "int8", None, torch.float16)
    y = Q.weight_only_matmul(x, q, s, 8, path="tiled", split_k=split_k)
    assert check_close(y, Q.weight_only_matmul_ref(x, q, s, 8), "float16").ok


def test_weight_only_arguments_checked():
    x = torch.randn(20, 384, device=DEV, dtype=torch.float16)
    q4, s4 = Q.quantize(torch.randn(8, 384, device=DEV), "int4", 128, torch.float16)
    with pytest.raises(AssertionError, match="path"):
        Q.weight_only_matmul(x, Q.pack_halves(q4, 128), s4, 4, 128, path="tiled")   # no tiled int4 kernel
    q4, s4 = Q.quantize(torch.randn(8, 512, device=DEV), "int4", 256, torch.float16)
    with pytest.raises(AssertionError, match="group"):
        Q.weight_only_matmul(torch.randn(1, 512, device=DEV, dtype=torch.float16), q4, s4, 4, 256)


@pytest.mark.parametrize("M", [1, 5])
def test_w8a8_matmul_few_rows(M):
    # one row of x has one per-row scale: it must still scale per column of W, not as a per-tensor scale
    xq, xs = Q.quantize(torch.randn(M, 64, device=DEV), "int8")
    wq, ws = Q.quantize(torch.randn(48, 64, device=DEV), "int8")
    y = Q.w8a8_matmul(xq, xs, wq, ws, out_dtype=torch.float32)
    exact = (xq.double() @ wq.double().T) * xs.double() * ws.double().reshape(1, -1)   # by hand, in float64
    assert torch.allclose(y.double(), exact, rtol=1e-5, atol=1e-5)
    assert torch.allclose(Q.w8a8_matmul_ref(xq, xs, wq, ws).double(), exact, rtol=1e-5, atol=1e-5)


def test_w8a8_matmul_exact_int_accumulation():
    xq, xs = Q.quantize(torch.randn(33, 64, device=DEV), "int8")
    wq, ws = Q.quantize(torch.randn(48, 64, device=DEV), "int8")
    y = Q.w8a8_matmul(xq, xs, wq, ws, out_dtype=torch.float32)
    assert check_close(y, Q.w8a8_matmul_ref(xq, xs, wq, ws), "float32", tol=1e-6).ok


def test_bench_cases_small_build_and_gate():
    cases = QB.bench_cases(("quantize", "w4a16"), small=True)
    assert {c.kernel for c in cases} == {"triton_quantize", "triton_w4a16"}
    for case in cases[:2]:
        bench = case.build()
        assert check_close((bench.view or (lambda r: r))(bench.run()), bench.reference(), case.gate, case.tol).ok
        assert "quant_rel_err" in bench.extra


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["quantize", "w8a16", "w4a16", "w8a8"])
def test_gpu_quant_cases_pass_gate(kind):
    # decode, mid and prefill M through every path; W8A8 at M = 1 (no _int_mm baseline) and at real sizes
    shapes = {"quantize": "1x4096x4096", "w8a16": "1x4096x4096,16x12288x4096,64x4096x4096,2048x4096x11008",
              "w4a16": "1x4096x11008,16x8192x8192,64x4096x4096,2048x4096x11008",
              "w8a8": "4096x4096x4096,100x300x256,1x8192x8192,1x12288x4096"}[kind]
    for case in QB.bench_cases((kind,), shapes):
        bench = case.build()
        view = bench.view or (lambda r: r)
        check = check_close(view(bench.run()), bench.reference(), case.gate or case.dtype, case.tol)
        assert check.ok, f"{case.key}: {check.message}"


def test_bench_cases_cover_the_public_kinds():
    assert QUANT_KINDS == QB.KINDS   # the CLI's choices (no torch at import) match the case module's
    cases = QB.bench_cases(("w8a16", "w4a16", "w8a8"), small=True)
    assert {c.kernel for c in cases} == {"triton_w8a16", "triton_w4a16", "triton_w8a8"}
    assert len({c.key for c in cases}) == len(cases)
    w8a8 = {c.shape: c.baseline for c in cases if c.kernel == "triton_w8a8"}
    assert w8a8 == {"33x48x64": "torch._int_mm", "1x48x64": "torch.matmul bf16"}


def test_interpret_quant_cli_records_the_path(tmp_path):
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, "-m", "mlsyscalc", "bench", "quant", "--interpret", "--quiet",
                           "--kind", "w4a16", "--shapes", "3x40x256,20x40x256", "--out", str(out), "--json"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert [(r["shape"], r["extra_path"]) for r in rows] == [("3x40x256", "gemv"), ("20x40x256", "dequant")]
    assert all(r["ok"] and r["rel_err"] < 5e-3 for r in rows)


_COMPILE_SM90 = """
from mlsyscalc.kernels import quant as Q
from mlsyscalc.kernels.matmul_compile import compile_for_hopper
for bm, bn, bk, dot, split in ((16, 256, 256, True, 1), (32, 256, 256, True, 4), (1, 512, 256, False, 2)):
    const = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, USE_DOT=dot, SPLIT_K=split)
    sig = dict(x_ptr="*bf16", w_ptr="*i8", s_ptr="*bf16", y_ptr="*fp32" if split > 1 else "*bf16", M="i32",
               N="i32", K="i32", stride_xm="i32", stride_wn="i32", stride_sn="i32", stride_ym="i32")
    kernel = compile_for_hopper(Q._w8a16_kernel, sig, const, num_warps=4, num_stages=3)
    print(dot, len(kernel.asm["cubin"]), "mma" in kernel.asm["ptx"])
const = dict(GROUP=128, BLOCK_N=32, GROUPS=2)
sig = dict(q_ptr="*u8", s_ptr="*bf16", y_ptr="*bf16", N="i32", K="i32", stride_qn="i32", stride_sn="i32", stride_yn="i32")
print("deq", len(compile_for_hopper(Q._dequantize_halves_kernel, sig, const, num_warps=4, num_stages=3).asm["cubin"]), "-")
"""


@needs_ptxas
def test_w8a16_and_dequantize_kernels_compile_for_sm90_bf16():
    # The interpreter runs neither bf16 nor the GPU compiler: compile the GPU paths (bf16 tensor-core dots,
    # CUDA-core sums, split-K atomics, the halves dequantizer) for sm_90 with triton's own compiler and
    # ptxas, in a process without TRITON_INTERPRET (no GPU needed). Only the tensor-core tiles use mma.
    lines = [line.split() for line in run_uninterpreted("-c", _COMPILE_SM90).strip().splitlines()]
    assert len(lines) == 4 and all(int(size) > 0 for _, size, _ in lines)
    assert [(dot, mma) for dot, _, mma in lines[:3]] == [("True", "True"), ("True", "True"), ("False", "False")]
