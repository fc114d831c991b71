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
from mlsyscalc.kernels import quant_w4 as W4

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
    cases = QB.bench_cases(("quantize", "w4a16"), small=True)
    assert {c.kernel for c in cases} == {"triton_quantize", "triton_w4a16"}
    for case in cases[:2]:
        bench = case.build()
        assert check_close((bench.view or (lambda r: r))(bench.run()), bench.reference(), case.gate, case.tol).ok
        assert "quant_rel_err" in bench.extra


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["quantize", "w8a16", "w4a16", "w4a16_evenodd", "w4a16_halves", "w8a8"])
def test_gpu_quant_cases_pass_gate(kind):
    # the W4A16 variants at an odd N with K % 256 != 0; the sweep gates every real shape again
    shapes = {"quantize": "1x4096x4096", "w8a16": "1x4096x4096,16x12288x4096",
              "w4a16": "1x4096x11008,16x8192x8192", "w4a16_evenodd": "3x4099x4224", "w4a16_halves": "3x4099x4224",
              "w8a8": "4096x4096x4096,100x300x256"}[kind]
    for case in QB.bench_cases((kind,), shapes):
        bench = case.build()
        view = bench.view or (lambda r: r)
        check = check_close(view(bench.run()), bench.reference(), case.gate or case.dtype, case.tol)
        assert check.ok, f"{case.key}: {check.message}"


# --- W4A16 variants that keep nibbles in packed order (kernels/quant_w4.py) --------------------

@pytest.mark.skipif(GPU, reason="48 CPU-interpreter cases (exact fp32 dots); on a GPU, test_gpu_quant_cases_pass_gate "
                    "runs the variants at an odd shape without autotuning 48 tiny ones")
@pytest.mark.parametrize("variant", ["evenodd", "halves"])
@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-3), (torch.float32, 1e-5)])
@pytest.mark.parametrize("M", [1, 3, 16])
@pytest.mark.parametrize("K,N,group", [(384, 37, 128), (256, 19, 32)])
@pytest.mark.parametrize("split_k", [1, 3])
def test_w4a16_packed_order_variants(variant, dtype, tol, M, K, N, group, split_k):
    # K = 384 is not a multiple of the interpreter's two-group tile: the last tile's second group is masked;
    # split_k = 3 leaves one K slice empty. M = 1, 3 take the CUDA-core path, M = 16 the dot path.
    x = torch.randn(M, K, device=DEV, dtype=dtype)
    q, s = Q.quantize(torch.randn(N, K, device=DEV), "int4", group, dtype)
    qv = W4.pack_halves(q, group) if variant == "halves" else q
    y = Q.weight_only_matmul(x, qv, s, 4, group, split_k=split_k, variant=variant)
    assert y.shape == (M, N) and y.dtype == dtype
    # the exact integer sums in fp32 times one scale per group: far inside the gate (fp32 ~5e-7 on the CPU)
    check = check_close(y, Q.weight_only_matmul_ref(x, q, s, 4, group), str(dtype).split(".")[1], tol=tol)
    assert check.ok, check.message


def test_pack_halves_layout_and_kernel_reads_it():
    x = torch.tensor([[1.0, -7.0, 7.0, 0.0]], device=DEV)  # scale 1: q = x, stored as q + 8 = 9, 1, 15, 8
    q, _ = Q.quantize(x, "int4", 4)
    assert W4.pack_halves(q, 4).tolist() == [[9 | (15 << 4), 1 | (8 << 4)]]   # byte j: k = j low, k = 2 + j high
    xs = torch.randn(5, 256, device=DEV, dtype=torch.float16)
    q, s = Q.quantize(torch.randn(24, 256, device=DEV), "int4", 128, torch.float16)
    ref = Q.weight_only_matmul_ref(xs, q, s, 4, 128)
    assert check_close(Q.weight_only_matmul(xs, W4.pack_halves(q, 128), s, 4, 128, variant="halves"), ref,
                       "float16").ok
    # fed quantize's own layout, the halves kernel pairs x with the wrong nibbles
    assert not check_close(Q.weight_only_matmul(xs, q, s, 4, 128, variant="halves"), ref, "float16").ok


def test_w4a16_variant_arguments_checked():
    x = torch.randn(1, 384, device=DEV, dtype=torch.float16)
    q4, s4 = Q.quantize(torch.randn(8, 384, device=DEV), "int4", 128, torch.float16)
    q8, s8 = Q.quantize(torch.randn(8, 384, device=DEV), "int8", None, torch.float16)
    with pytest.raises(AssertionError, match="variant"):
        Q.weight_only_matmul(x, q8, s8, 8, variant="evenodd")
    with pytest.raises(AssertionError, match="variant"):
        Q.weight_only_matmul(x, q4, s4, 4, 128, variant="nibbles")
    with pytest.raises(AssertionError, match="K % 256"):   # the default kernel keeps its K % 256 rule
        Q.weight_only_matmul(x, q4, s4, 4, 128)


def test_bench_cases_time_w4a16_variants_side_by_side():
    assert QUANT_KINDS == QB.KINDS   # the CLI's choices (no torch at import) match the kernel side's
    cases = QB.bench_cases(("w4a16", "w4a16_evenodd", "w4a16_halves"), small=True)
    by_kernel: dict[str, list] = {}
    for case in cases:
        by_kernel.setdefault(case.kernel, []).append(case)
    assert set(by_kernel) == {"triton_w4a16", "triton_w4a16_evenodd", "triton_w4a16_halves"}
    # same shapes, dtype, baseline and byte counts: the rows differ only in the kernel
    assert len({tuple((c.shape, c.dtype, c.baseline, c.bytes) for c in group) for group in by_kernel.values()}) == 1
    assert len({c.key for c in cases}) == len(cases)
    for case in by_kernel["triton_w4a16_halves"] + by_kernel["triton_w4a16_evenodd"][:1]:
        bench = case.build()
        assert check_close(bench.run(), bench.reference(), case.gate).ok


def test_interpret_quant_cli_records_w4a16_variants(tmp_path):
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, "-m", "mlsyscalc", "bench", "quant", "--interpret", "--quiet",
                           "--kind", "w4a16_evenodd", "--kind", "w4a16_halves", "--shapes", "3x40x256",
                           "--out", str(out), "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert sorted(r["kernel"] for r in rows) == ["triton_w4a16_evenodd", "triton_w4a16_halves"]
    assert all(r["ok"] and r["rel_err"] < 5e-3 and r["shape"] == "3x40x256" for r in rows)


_COMPILE_SM90 = """
from mlsyscalc.kernels import quant_w4 as W4
from mlsyscalc.kernels.matmul_compile import compile_for_hopper
for halves, bm, bn, bk, dot, split in ((False, 16, 32, 256, True, 1), (True, 16, 16, 512, True, 2),
                                       (False, 1, 8, 512, False, 2), (True, 2, 4, 1024, False, 1)):
    const = dict(BITS=4, GROUP=128, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, USE_DOT=dot, SPLIT_K=split, X_HALVES=halves)
    sig = dict(x_ptr="*bf16", w_ptr="*u8", s_ptr="*bf16", y_ptr="*fp32" if split > 1 else "*bf16", M="i32",
               N="i32", K="i32", stride_xm="i32", stride_wn="i32", stride_sn="i32", stride_ym="i32")
    kernel = compile_for_hopper(W4._w4_packed_order_kernel, sig, const, num_warps=4, num_stages=3)
    print(halves, dot, len(kernel.asm["cubin"]), "mma.sync" in kernel.asm["ptx"])
"""


@needs_ptxas
def test_w4a16_packed_order_kernel_compiles_for_sm90_bf16():
    # The interpreter runs neither bf16 nor the GPU compiler: compile the GPU path (bf16 tensor-core dots,
    # CUDA-core sums, split-K atomics) for sm_90 with triton's own compiler and ptxas, in a process
    # without TRITON_INTERPRET (no GPU needed). Tensor-core dots must lower to mma, CUDA-core sums must not.
    lines = [line.split() for line in run_uninterpreted("-c", _COMPILE_SM90).strip().splitlines()]
    assert len(lines) == 4 and all(int(size) > 0 for *_, size, _ in lines)
    assert [(dot, mma) for _, dot, _, mma in lines] == [("True", "True"), ("True", "True"), ("False", "False"),
                                                         ("False", "False")]
