"""Triton matmul against torch: CPU interpreter at small odd shapes, GPU tests with bf16/fp8."""

from __future__ import annotations

import pytest
import torch
import triton.testing

from mlsyscalc.bench.harness import check_close
from mlsyscalc.kernels import matmul as mm
from mlsyscalc.bench.cases import matmul as mb
from mlsyscalc.kernels import matmul_launch as ml
from mlsyscalc.kernels import matmul_splitk as sk

from .sm90 import run_uninterpreted

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")


def _inputs(M, N, K, dtype, b_layout):
    a = torch.randn(M, K, device=DEV, dtype=dtype)
    w = torch.randn(N, K, device=DEV, dtype=dtype) / K**0.5
    b = w.T if b_layout == "col" else w.T.contiguous()  # (K, N) column- or row-major
    return a, b


@pytest.mark.parametrize("path", ["ptr", "tma", "dtma"])
@pytest.mark.parametrize("M,N,K,dtype,b_layout", [
    (37, 45, 53, torch.float16, "col"),   # odd everything: masked edges (pointer path only)
    (64, 48, 40, torch.float16, "row"),
    (40, 56, 24, torch.float32, "col"),
])
def test_matmul_matches_torch(path, M, N, K, dtype, b_layout):
    a, b = _inputs(M, N, K, dtype, b_layout)
    if path in ("tma", "dtma") and not (mm._tma_ok(a) and mm._tma_ok(b)):
        with pytest.raises(ValueError, match="16-byte"):
            mm.matmul(a, b, path=path)
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


@pytest.mark.parametrize("a_layout", ["row", "col"])
@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_device_descriptors_read_every_layout(a_layout, b_layout):
    # path "dtma" builds its descriptors in the kernel: A or A^T, B or W = B^T, C row-major
    a, b = _inputs(64, 48, 32, torch.float16, b_layout)
    if a_layout == "col":
        a = a.T.contiguous().T
    out = mm.matmul(a, b, path="dtma", bias=torch.ones(48, device=DEV, dtype=torch.float16))
    check = check_close(out, a.double() @ b.double() + 1.0, "float16")
    assert check.ok, check.message


@pytest.mark.parametrize("kernel", ["tma", "dtma"])
def test_subtile_epilogue_stores_both_halves(kernel):
    # SUBTILE: the epilogue stores C as two (BLOCK_M, BLOCK_N / 2) halves; edges (M = 70) included
    from triton.tools.tensor_descriptor import TensorDescriptor

    M, N, K = 70, 96, 64
    a, b = _inputs(M, N, K, torch.float16, "col")
    bias = torch.randn(N, device=DEV, dtype=torch.float16)
    c = torch.zeros(M, N, device=DEV, dtype=torch.float16)
    tiles = 3 * 3   # 32x32 tiles
    meta = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, NUM_SMS=4, SCALE=mm.SCALE_NONE, HAS_BIAS=True,
                ACT=mm.ACTIVATIONS["relu"], INT8=False, SUBTILE=True)
    assert tiles > meta["NUM_SMS"]   # programs loop over several tiles
    if kernel == "tma":
        a_desc, b_desc, a_t, b_nk = mm._descriptors(a, b)
        c_desc = TensorDescriptor.from_tensor(c, [16, 16])
        mm._set_block_shapes(dict(a_desc=a_desc, b_desc=b_desc, c_desc=c_desc, A_T=a_t, B_NK=b_nk, **meta))
        assert c_desc.block_shape == [32, 16]
        mm._matmul_tma_kernel[(4,)](a_desc, b_desc, c_desc, c, c, bias, M, N, K, A_T=a_t, B_NK=b_nk, **meta)
    else:
        if GPU:
            mm.matmul_launch.use_scratch_allocator()
        mm._matmul_dtma_kernel[(4,)](a, b, c, c, c, bias, M, N, K, *mm._dtma_strides(a, b, c), A_T=False, B_NK=True,
                                     **meta)
    check = check_close(c, mm.matmul_ref(a, b, bias=bias, activation="relu"), "float16")
    assert check.ok, check.message


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
    case = mb.bench_case(37, 45, 53, "float16" if not GPU else "bfloat16")
    assert case.flops == 2 * 37 * 45 * 53
    bench = case.build()
    assert check_close(bench.run(), bench.reference(), case.gate).ok



def _fp8_aligned(shapes, dtypes):
    """(M, N, K, dtype) cases; fp8 only where K rows are 16-byte aligned, as torch._scaled_mm needs."""
    return [(*shape, d) for shape in shapes for d in dtypes if not (d.startswith("fp8") and shape[2] % 16)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype", _fp8_aligned(
    [(4096, 4096, 4096), (1000, 1000, 1000), (2048, 12288, 4096), (129, 300, 72)],
    ["bfloat16", "fp8_tensor", "fp8_row"]))
def test_gpu_matmul_bf16_fp8(M, N, K, dtype):
    bench = mb.bench_case(M, N, K, dtype).build()
    check = check_close(bench.run(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype)
    assert check.ok, check.message
    assert check_close(bench.baseline(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype).ok


# --- split-K (kernels/matmul_splitk.py) and the launch cache (kernels/matmul_launch.py) ----------
# Under the interpreter the split-K kernel uses 32x32x32 tiles: K = 150 is 5 k-tiles, so splits of
# 2 and 3 give uneven slices (3+2, 2+2+1) ending in a partial tile; K = 53 is 2 k-tiles, so split 4
# leaves two empty slices that must contribute zeros.

@pytest.mark.parametrize("M,N,K,dtype,b_layout,split,path", [
    (37, 45, 150, torch.float16, "col", 2, "ptr"),
    (37, 45, 150, torch.float16, "row", 3, "ptr"),
    (37, 45, 53, torch.float16, "col", 4, "ptr"),
    (40, 56, 150, torch.float32, "row", 3, "ptr"),
    (64, 48, 160, torch.float16, "col", 3, "ptr"),
    (64, 48, 160, torch.float16, "col", 3, "tma"),   # TMA-addressable: descriptor loads, zero-filled edges
    (64, 48, 160, torch.float32, "row", 2, "tma"),
    (48, 40, 72, torch.float16, "row", 4, "tma"),    # 3 k-tiles over 4 slices: one empty
    (33, 40, 24, torch.float16, "col", 1, "ptr"),    # split 1: small tiles, epilogue in the same kernel
    (48, 40, 72, torch.float32, "col", 1, "tma"),
])
def test_splitk_matches_torch_with_epilogue_once(M, N, K, dtype, b_layout, split, path):
    a, b = _inputs(M, N, K, dtype, b_layout)
    bias = torch.randn(N, device=DEV, dtype=dtype) + 2.0   # large next to the partial sums
    name = str(dtype).split(".")[1]
    # bias added once per K-slice, or relu applied to partial sums, would miss this by far
    out = mm.matmul(a, b, bias=bias, activation="relu", split_k=split, path=path)
    check = check_close(out, mm.matmul_ref(a, b, bias=bias, activation="relu"), name)
    assert check.ok, check.message
    assert out.dtype == dtype and out.shape == (M, N)
    plain = mm.matmul(a, b, split_k=split, path=path)
    assert check_close(plain, a.double() @ b.double(), name).ok


def test_splitk_column_major_a_row_scales_and_int8_exact():
    a = torch.randn(45, 150, device=DEV, dtype=torch.float16).T.contiguous().T  # column-major A
    _, b = _inputs(45, 40, 150, torch.float16, "col")
    sa, sb = torch.rand(45, device=DEV) + 0.5, torch.rand(40, device=DEV) + 0.5
    out = mm.matmul(a, b, a_scale=sa, b_scale=sb, activation="silu", split_k=3)
    assert check_close(out, mm.matmul_ref(a, b, a_scale=sa, b_scale=sb, activation="silu"), "float16").ok
    a8 = torch.randint(-127, 128, (33, 150), device=DEV, dtype=torch.int8)
    w8 = torch.randint(-127, 128, (48, 150), device=DEV, dtype=torch.int8)
    one = torch.ones(1, device=DEV)
    out = mm.matmul(a8, w8.T, a_scale=one, b_scale=one, out_dtype=torch.float32, split_k=2)
    assert torch.equal(out, (a8.double() @ w8.double().T).float())  # int32 partials, int32 sum: exact


def test_choose_split_k_fills_idle_sms_only():
    assert sk.choose_split_k(1024, 1024, 1024, 132) == 2      # 64 tiles -> 128 programs
    assert sk.choose_split_k(16, 4096, 4096, 132) == 4        # 32 tiles, K/4 = 1024
    assert sk.choose_split_k(1, 4096, 11008, 132) == 4
    assert sk.choose_split_k(2048, 2048, 2048, 132) is None   # 256 tiles: persistent kernel
    assert sk.choose_split_k(16, 57344, 8192, 132) is None    # 448 tiles
    assert sk.choose_split_k(64, 256, 300, 132) == 1          # K too short to split
    assert mm.resolve_split_k(None, 1024, 1024, 1024, 132) is None
    assert mm.resolve_split_k("auto", 1024, 1024, 1024, 132) == 2
    for bad in (0, -2, "2", True, 1.5):
        with pytest.raises(ValueError, match="split_k"):
            mm.resolve_split_k(bad, 64, 64, 64, 132)


def test_splitk_auto_resolves_and_bench_names_the_choice():
    assert [mb.kernel_name(s) for s in (None, "auto", 4)] == \
        ["triton_matmul", "triton_matmul_splitk_auto", "triton_matmul_splitk4"]
    assert mb.kernel_name(2, launch_cache=True) == "triton_matmul_splitk2"
    assert mb.kernel_name(2, launch_cache=False) == "triton_matmul_splitk2_nocache"
    assert mb.kernel_name(None, path="tma") == "triton_matmul_tma"
    assert [mb.parse_split_k(t) for t in ("none", "auto", "3")] == [None, "auto", 3]
    with pytest.raises(ValueError, match="split-K '0' is not none, auto or a positive integer"):
        mb.parse_split_k("0")
    case = mb.bench_case(37, 45, 150, "float16" if not GPU else "bfloat16", split_k="auto")
    assert case.kernel == "triton_matmul_splitk_auto" and case.key != mb.bench_case(37, 45, 150).key
    bench = case.build()
    expected = mm.resolve_split_k("auto", 37, 45, 150, mm._num_sms(torch.device(DEV))) or 0
    assert bench.extra["split_k"] == expected
    assert check_close(bench.run(), bench.reference(), case.gate).ok


class _FakeAutotuned:
    """What launch() reads from a triton Autotuner after a call: arg_names and best_config."""
    arg_names = ["x_ptr", "n", "BLOCK", "FLAG", "SPLIT"]

    def __init__(self):
        import triton

        self.best_config = triton.Config({"BLOCK": 64}, num_warps=4, pre_hook=None)


def test_launch_entry_orders_constexprs_by_signature_and_freezes_grid():
    kernel, x = _FakeAutotuned(), torch.zeros(8)
    entry = ml.make_entry(kernel, "compiled", lambda meta: (meta["n"] // meta["BLOCK"], meta["SPLIT"]),
                          (x, 256), dict(SPLIT=3, FLAG=True))
    assert entry.tail == (64, True, 3)          # BLOCK from the config, then FLAG, SPLIT in signature order
    assert entry.grid == (4, 3, 1)
    with pytest.raises(ValueError, match="FLAG"):
        ml.make_entry(kernel, "compiled", (1,), (x, 256), dict(SPLIT=3))


def test_launch_key_separates_what_the_jit_specialises_on():
    x = torch.zeros(64, dtype=torch.float16)
    key = ml.launch_key(_FakeAutotuned, 0, (x, 64), dict(SPLIT=2))
    assert key == ml.launch_key(_FakeAutotuned, 0, (torch.ones(64, dtype=torch.float16), 64), dict(SPLIT=2))
    assert key != ml.launch_key(_FakeAutotuned, 0, (x[1:], 64), dict(SPLIT=2))          # 2-byte offset
    assert key != ml.launch_key(_FakeAutotuned, 0, (x.float(), 64), dict(SPLIT=2))      # dtype
    assert key != ml.launch_key(_FakeAutotuned, 0, (x, 65), dict(SPLIT=2))              # an integer
    assert key != ml.launch_key(_FakeAutotuned, 0, (x, 64), dict(SPLIT=4))              # a constexpr
    assert key != ml.launch_key(_FakeAutotuned, 1, (x, 64), dict(SPLIT=2))              # the device
    # a fixed grid: decode attention's batch is only its grid's last dimension (same arguments, 16 vs 64
    # sequences), so the grid must separate launches; a callable grid is keyed by what it is computed from
    grid16 = ml.launch_key(_FakeAutotuned, 0, (x, 64), dict(SPLIT=2), (1, 32, 16))
    assert grid16 != ml.launch_key(_FakeAutotuned, 0, (x, 64), dict(SPLIT=2), (1, 32, 64))
    assert grid16 == ml.launch_key(_FakeAutotuned, 0, (x, 64), dict(SPLIT=2), (1, 32, 16))
    assert key == ml.launch_key(_FakeAutotuned, 0, (x, 64), dict(SPLIT=2), lambda meta: (1,))


class _FakeCompiled:
    """Stands in for a CompiledKernel: records direct launches, or fails like a changed triton API."""
    function, packed_metadata = "fn", "meta"

    def __init__(self, fail=False):
        self.fail, self.launches = fail, []

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, g0, g1, g2, stream, function, packed, metadata, enter, exit_, *args):
        if self.fail:
            raise TypeError("launcher takes other arguments")
        self.launches.append(((g0, g1, g2), args))


class _FakeKernel(_FakeAutotuned):
    def __init__(self, compiled):
        super().__init__()
        self.compiled, self.calls = compiled, 0

    def __getitem__(self, grid):
        def call(*args, **consts):
            self.calls += 1
            return self.compiled
        return call


@pytest.mark.parametrize("fail", [False, True])
def test_launch_reuses_the_entry_and_falls_back_when_the_launcher_differs(monkeypatch, fail):
    class _Driver:  # the CUDA driver's device/stream queries, without a GPU
        class active:
            get_current_device = staticmethod(lambda: 0)
            get_current_stream = staticmethod(lambda device: 7)

    monkeypatch.setattr(ml, "driver", _Driver)
    monkeypatch.setattr(ml, "_on_gpu", lambda x: True)
    monkeypatch.setattr(ml, "disabled", None)
    monkeypatch.setattr(ml, "_ENTRIES", {})
    kernel, x = _FakeKernel(_FakeCompiled(fail)), torch.zeros(8)
    ml.launch(kernel, (2,), (x, 256), dict(FLAG=True, SPLIT=3))       # through kernel[grid], remembered
    if not fail:
        ml.launch(kernel, (2,), (x, 256), dict(FLAG=True, SPLIT=3))   # direct
        assert kernel.calls == 1 and kernel.compiled.launches == [((2, 1, 1), (x, 256, 64, True, 3))]
        return
    with pytest.warns(RuntimeWarning, match="launch cache off"):
        ml.launch(kernel, (2,), (x, 256), dict(FLAG=True, SPLIT=3))
    assert kernel.calls == 2 and "TypeError" in ml.disabled and not ml._ENTRIES


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype", _fp8_aligned(
    [(1024, 1024, 1024), (16, 4096, 4096), (1, 4096, 11008), (129, 300, 72)], ["bfloat16", "fp8_tensor"]))
@pytest.mark.parametrize("split_k", ["auto", 3])
def test_gpu_splitk_bf16_fp8(M, N, K, dtype, split_k):
    bench = mb.bench_case(M, N, K, dtype, split_k=split_k).build()
    check = check_close(bench.run(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype)
    assert check.ok, check.message
    first = bench.run()
    assert torch.equal(first, bench.run())  # fixed-order reduction: bitwise repeatable


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("split_k", [None, 2])
def test_gpu_launch_cache_hits_and_respects_alignment(split_k):
    ml.clear()
    a, b = _inputs(512, 384, 256, torch.bfloat16, "col")
    bias = torch.randn(385, device=DEV, dtype=torch.bfloat16)
    for bias_view in (bias[:384], bias[1:]):    # aligned, then 2 bytes off: a different specialisation
        for _ in range(2):                      # the second call of each goes through the cache
            a.normal_()
            # path "dtma" forced: "auto" would also time the host-descriptor path on this few-tile shape
            out = mm.matmul(a, b, bias=bias_view, split_k=split_k, path="dtma", launch_cache=True)
            assert check_close(out, mm.matmul_ref(a, b, bias=bias_view), "bfloat16").ok
    assert ml.disabled is None                                      # no fallback to the slow launch
    assert len(ml._ENTRIES) == 2 * (1 if split_k is None else 2)  # one per signature (and kernel)


def test_interpret_cli_times_each_split_choice_as_its_own_kernel(tmp_path):
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "mlsyscalc", "bench", "matmul", "--interpret", "--quiet", "--shapes", "37x45x150",
           "--dtype", "float16", "--out", str(tmp_path / "rows.jsonl"), "--json"]
    proc = subprocess.run(cmd + ["--split-k", "none", "--split-k", "auto", "--split-k", "3"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert [r["kernel"] for r in rows] == ["triton_matmul", "triton_matmul_splitk_auto", "triton_matmul_splitk3"]
    assert all(r["ok"] for r in rows) and [r["extra_split_k"] for r in rows] == [0, 1, 3]
    bad = subprocess.run(cmd + ["--split-k", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "split-K" in bad.stderr


def test_splitk_kernels_compile_for_hopper_without_a_gpu():
    # triton's own ptxas builds sm_90 cubins with no driver; a fresh process, since the
    # interpreter (set for CPU runs) replaces @triton.jit with something that does not compile
    import json

    results = [json.loads(line) for line in run_uninterpreted("-m", "mlsyscalc.kernels.matmul_compile").splitlines()]
    assert len(results) == 8 and all(r["cubin_bytes"] > 0 for r in results)
    for r in results:
        if r["kernel"] == "partial":
            assert r["wgmma"] > 0, r                     # Hopper tensor-core MMA, not mma.sync
            assert (r["tma_loads"] > 0) == r["tma"], r   # descriptor loads are TMA bulk copies


@gpu
@pytest.mark.gpu
def test_gpu_tuning_timer_matches_do_bench_on_a_long_kernel():
    # 4096^3 bf16 runs ~0.2 ms, far above any host cost: the graph timer and do_bench must agree (at and
    # above tuning.LONG_MS the timer hands over to do_bench itself; 4096^3 sits near that line)
    from mlsyscalc.kernels.tuning import gpu_time_ms

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    graph_ms = gpu_time_ms(lambda: a @ a)
    plain_ms = triton.testing.do_bench(lambda: a @ a, return_mode="median")
    assert 0.7 * plain_ms < graph_ms < 1.3 * plain_ms, (graph_ms, plain_ms)
    assert len(gpu_time_ms(lambda: a @ a, quantiles=(0.5, 0.2, 0.8))) == 3


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "fp8_tensor"])
def test_gpu_repeated_calls_take_the_fast_path_and_read_their_own_inputs(dtype):
    # after the first call of a signature, matmul() launches the remembered entry (mm._FAST)
    for i in range(3):
        bench = mb.bench_case(256, 384, 512, dtype).build()
        check = check_close(bench.run(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype)
        assert check.ok, (i, check.message)
    assert any(k[5] == (256, 512) for k in mm._FAST)
    a = torch.randn(257, 512, device="cuda", dtype=torch.bfloat16)[1:]   # misaligned rows: its own key
    w = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        assert check_close(mm.matmul(a, w.T), a.double() @ w.T.double(), "bfloat16").ok


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "fp8_tensor"])
@pytest.mark.parametrize("forced", ["dtma", "tma"])
def test_gpu_few_tile_path_choice_and_both_fast_paths(dtype, forced, monkeypatch):
    # few-tile shapes time both descriptor paths once (mm._PATH); a repeated call then launches the chosen
    # path's entry with new tensors: host descriptors through _lean_desc, or device-built ones
    monkeypatch.setattr(mm, "_FAST", {})
    monkeypatch.setattr(mm, "_PATH", {})
    bench = mb.bench_case(320, 448, 256, dtype).build()
    assert check_close(bench.run(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype).ok
    assert len(mm._PATH) == 1 and set(mm._PATH.values()) <= {"dtma", "tma"}
    for key in mm._PATH:   # force each path in turn and start its fast entry afresh
        mm._PATH[key] = forced
    mm._FAST.clear()
    for i in range(3):   # first call makes the entry, the next two take it, each with fresh inputs
        bench = mb.bench_case(320, 448, 256, dtype).build()
        check = check_close(bench.run(), bench.reference(), "fp8" if dtype.startswith("fp8") else dtype)
        assert check.ok, (forced, i, check.message)
    (hit,) = mm._FAST.values()
    assert (hit[3] is not None) == (forced == "tma")


@gpu
@pytest.mark.gpu
def test_gpu_few_tile_fp8_output_dtypes_are_tuned_apart():
    # with scales and a bias, no argument of the host-descriptor kernel carries C's dtype: C_BYTES keys
    # its tuning, so an fp32-output call after a bf16 one does not reuse tiles sized for 2-byte C
    x8, sx = mm.quantize_fp8(torch.randn(256, 512, device=DEV), False)
    w8, sw = mm.quantize_fp8(torch.randn(384, 512, device=DEV), False)
    bias = torch.randn(384, device=DEV, dtype=torch.bfloat16)
    ref = mm.matmul_ref(x8, w8.T, bias=bias, a_scale=sx, b_scale=sw)
    for out_dtype in (torch.bfloat16, torch.float32):
        for path in ("auto", "tma"):
            out = mm.matmul(x8, w8.T, bias=bias, a_scale=sx, b_scale=sw, out_dtype=out_dtype, path=path)
            assert out.dtype == out_dtype and check_close(out, ref, "fp8").ok, (out_dtype, path)
