"""Triton matmul against torch: CPU interpreter at small odd shapes, GPU tests with bf16/fp8."""

from __future__ import annotations

import pytest
import torch

from mlsyscalc.bench.harness import check_close
from mlsyscalc.kernels import matmul as mm

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")


def _inputs(M, N, K, dtype, b_layout):
    a = torch.randn(M, K, device=DEV, dtype=dtype)
    w = torch.randn(N, K, device=DEV, dtype=dtype) / K**0.5
    b = w.T if b_layout == "col" else w.T.contiguous()  # (K, N) column- or row-major
    return a, b


@pytest.mark.parametrize("path", ["ptr", "tma"])
@pytest.mark.parametrize("M,N,K,dtype,b_layout", [
    (37, 45, 53, torch.float16, "col"),   # odd everything: masked edges (pointer path only)
    (64, 48, 40, torch.float16, "row"),
    (40, 56, 24, torch.float32, "col"),
])
def test_matmul_matches_torch(path, M, N, K, dtype, b_layout):
    a, b = _inputs(M, N, K, dtype, b_layout)
    if path == "tma" and not (mm._tma_ok(a) and mm._tma_ok(b)):
        with pytest.raises(ValueError, match="16-byte"):
            mm.matmul(a, b, path="tma")
        return
    check = check_close(mm.matmul(a, b, path=path), a.double() @ b.double(), str(dtype).split(".")[1])
    assert check.ok, check.message


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_fused_epilogue_bias_activation_and_row_scales(activation):
    a, b = _inputs(33, 40, 32, torch.float16, "col")
    bias = torch.randn(40, device=DEV, dtype=torch.float16)
    sa, sb = torch.rand(33, device=DEV) + 0.5, torch.rand(40, device=DEV) + 0.5
    out = mm.matmul(a, b, bias=bias, activation=activation, a_scale=sa, b_scale=sb)
    ref = mm.matmul_ref(a, b, bias=bias, activation=activation, a_scale=sa, b_scale=sb)
    assert check_close(out, ref, "float16").ok
    assert out.dtype == torch.float16 and out.shape == (33, 40)


def test_column_major_a_and_int8_exact():
    a = torch.randn(48, 32, device=DEV, dtype=torch.float16).T.contiguous().T  # column-major A
    _, b = _inputs(48, 32, 32, torch.float16, "col")
    assert check_close(mm.matmul(a, b), a.double() @ b.double(), "float16").ok
    a8 = torch.randint(-127, 128, (33, 64), device=DEV, dtype=torch.int8)
    w8 = torch.randint(-127, 128, (48, 64), device=DEV, dtype=torch.int8)
    one = torch.ones(1, device=DEV)
    out = mm.matmul(a8, w8.T, a_scale=one, b_scale=one, out_dtype=torch.float32)
    assert torch.equal(out, (a8.double() @ w8.double().T).float())  # int32 accumulation is exact


def test_launcher_rejects_bad_input():
    a, b = _inputs(16, 16, 16, torch.float16, "col")
    with pytest.raises(AssertionError, match="inner"):
        mm.matmul(a, b[:8])
    with pytest.raises(AssertionError, match="activation"):
        mm.matmul(a, b, activation="tanh")


def test_bench_case_gates_and_counts():
    case = mm.bench_case(37, 45, 53, "float16" if not GPU else "bfloat16")
    assert case.flops == 2 * 37 * 45 * 53
    bench = case.build()
    assert check_close(bench.run(), bench.reference(), case.gate).ok


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 1000, 1000), (2048, 12288, 4096), (129, 300, 72)])
@pytest.mark.parametrize("dtype", ["bfloat16", "fp8_tensor", "fp8_row"])
def test_gpu_matmul_bf16_fp8(M, N, K, dtype):
    if dtype.startswith("fp8") and K % 16:
        pytest.skip("fp8 rows need 16-byte alignment for torch._scaled_mm")
    bench = mm.bench_case(M, N, K, dtype).build()
    check = check_close(bench.run(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype)
    assert check.ok, check.message
    assert check_close(bench.baseline(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype).ok
