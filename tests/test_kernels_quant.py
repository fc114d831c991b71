"""Quantize/dequantize and quantised matmuls: CPU interpreter at small odd shapes, GPU at real ones."""

from __future__ import annotations

import pytest
import torch

from mlsyscalc.bench.harness import check_close
from mlsyscalc.kernels import quant as Q

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


@pytest.mark.parametrize("bits,group", [(8, None), (4, 128), (4, 64)])
@pytest.mark.parametrize("M", [1, 5, 20])
@pytest.mark.parametrize("split_k", [1, 2])
def test_weight_only_matmul(bits, group, M, split_k):
    K, N = 256, 40
    x = torch.randn(M, K, device=DEV, dtype=torch.float16)
    q, s = Q.quantize(torch.randn(N, K, device=DEV), "int8" if bits == 8 else "int4", group, torch.float16)
    y = Q.weight_only_matmul(x, q, s, bits, group, split_k=split_k)
    assert y.shape == (M, N) and y.dtype == torch.float16
    check = check_close(y, Q.weight_only_matmul_ref(x, q, s, bits, group), "float16")
    assert check.ok, check.message


def test_w8a8_matmul_exact_int_accumulation():
    xq, xs = Q.quantize(torch.randn(33, 64, device=DEV), "int8")
    wq, ws = Q.quantize(torch.randn(48, 64, device=DEV), "int8")
    y = Q.w8a8_matmul(xq, xs, wq, ws, out_dtype=torch.float32)
    assert check_close(y, Q.w8a8_matmul_ref(xq, xs, wq, ws), "float32", tol=1e-6).ok


def test_bench_cases_small_build_and_gate():
    cases = Q.bench_cases(("quantize", "w4a16"), small=True)
    assert {c.kernel for c in cases} == {"triton_quantize", "triton_w4a16"}
    for case in cases[:2]:
        bench = case.build()
        assert check_close((bench.view or (lambda r: r))(bench.run()), bench.reference(), case.gate, case.tol).ok
        assert "quant_rel_err" in bench.extra


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["quantize", "w8a16", "w4a16", "w8a8"])
def test_gpu_quant_cases_pass_gate(kind):
    shapes = {"quantize": "1x4096x4096", "w8a16": "1x4096x4096,16x12288x4096",
              "w4a16": "1x4096x11008,16x8192x8192", "w8a8": "4096x4096x4096,100x300x256"}[kind]
    for case in Q.bench_cases((kind,), shapes):
        bench = case.build()
        view = bench.view or (lambda r: r)
        check = check_close(view(bench.run()), bench.reference(), case.gate or case.dtype, case.tol)
        assert check.ok, f"{case.key}: {check.message}"
