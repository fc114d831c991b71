"""The measured kernel pages (mlsyscalc/report/kernels.py: reports/matmul and reports/quant) on rows written by
hand: the roofline column each row gets from the calculator, every cell of the rows table with its unit, each
goal's geomean, minimum, counts and verdict, the card line, and the bars of the page's figure."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mlsyscalc.bench.rows import Row
from mlsyscalc.report import kernels

CEILINGS = {"gpu": "NVIDIA H200", "sm_count": 132,
            "peak_flops": {"bf16": 784.4e12, "fp8": 1284.5e12, "int8": 0, "tf32": 354.2e12},
            "bandwidth_Bps": {"read": 4306e9, "write": 4675e9, "copy": 4266e9}}


def _row(kernel="triton_matmul", shape="4096x4096x4096", dtype="bfloat16", ms=1.0, base=1.0, **kw):
    m, n, k = ([int(d) for d in shape.split("x")] + [1])[:3]  # quantize rows are MxN
    flops = kw.pop("flops", 2.0 * m * n * k)
    nbytes = kw.pop("bytes", 2.0 * (m * k + k * n + m * n))
    return Row(kernel, "torch.matmul", shape, dtype, ok=True, median_ms=ms, baseline_median_ms=base, flops=flops,
               bytes=nbytes, **kw).finish()


def test_roofline_column_comes_from_the_calculator_at_the_cards_ceilings():
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.ops import predict_matmul, predict_memory_op

    calibration = __import__("json").loads((Path(__file__).parents[1] / "reports/matmul/ceilings.json").read_text())
    ceil = load_ceilings(calibration=calibration)
    mm = _row(shape="2048x1024x512", ms=0.05)
    w4 = _row("triton_w4a16", "16x4096x4096", "w4a16_g128", ms=0.02)
    q = _row("triton_quantize", "4096x8192", "fp8_row", ms=0.03, bytes=4096 * 8192 * 3.0)
    untimed = _row(shape="64x64x64", ms=None)
    other = _row("triton_quantize", "4096x8192", "int8_row", ms=0.01, bytes=None)  # no bytes: no prediction
    kernels.add_predictions([mm, w4, q, untimed, other], calibration)
    want = predict_matmul(2048, 1024, 512, dtype="bf16", gpu=ceil).predicted_s * 1e3
    assert mm.predicted_ms == pytest.approx(want, rel=1e-12)
    assert mm.prediction_error == pytest.approx((0.05 - want) / want, rel=1e-12)
    want = predict_matmul(16, 4096, 4096, dtype="bf16", gpu=ceil, weight_dtype="int4").predicted_s * 1e3
    assert w4.predicted_ms == pytest.approx(want, rel=1e-12)
    read = 4096 * 8192 * 2.0  # the bf16 input; the rest of the row's bytes is written
    want = predict_memory_op("quantize", read, 4096 * 8192 * 1.0, gpu=ceil).predicted_s * 1e3
    assert q.predicted_ms == pytest.approx(want, rel=1e-12)
    assert untimed.predicted_ms is None and other.predicted_ms is None


def test_rows_table_cells_and_units():
    r = _row(shape="4096x4096x4096", ms=0.2, base=0.25, rel_err=0.00123, predicted_ms=0.16, extra={"host_us": 12.4},
             error="x" * 100)
    r.finish()
    lines = kernels.rows_table([r, _row(shape="8x8x8", ms=None, base=None, error="OOM")], copy_GBps=4000.0)
    assert lines[0] == ("| kernel | dtype | shape (MxNxK) | ms | baseline ms | TFLOP/s | GB/s | % copy BW | speedup | "
                        "rel err | roofline ms | error vs roofline | host us/call | error |")
    tflops = 2 * 4096**3 / 0.2e-3 / 1e12  # 687.2
    gbps = 2 * 3 * 4096**2 / 0.2e-3 / 1e9  # 503.3
    assert lines[2] == (f"| triton_matmul | bfloat16 | 4096x4096x4096 | 0.2000 | 0.2500 | {tflops:.0f} | {gbps:.0f} | "
                        f"{gbps / 4000:.0%} | 1.25x | 1.2e-03 | 0.1600 | +25% | 12 | {'x' * 80} |")
    assert lines[3] == "| triton_matmul | bfloat16 | 8x8x8 | n/a | n/a | n/a | n/a |  | n/a | n/a | n/a | n/a | n/a | OOM |"
    assert kernels.rows_table([r], None)[2].split(" | ")[7] == ""  # no copy bandwidth: no share


def test_goals_geomean_minimum_counts_and_verdict():
    rows = [_row(shape="1024x1024x1024", ms=1.0, base=0.5),  # 0.5x, a small square
            _row(shape="4096x4096x4096", ms=1.0, base=1.2), _row(shape="8192x8192x8192", ms=1.0, base=1.1),
            _row(shape="16x8192x8192", ms=None, base=1.0, error="compile")]
    table = kernels.goals_table(rows, None)
    gm = (0.5 * 1.2 * 1.1) ** (1 / 3)
    assert table[0] == "| kernel | baseline | goal | measured geomean | measured min (shape) | timed / failed | met? |"
    assert table[2] == (f"| bf16 matmul, prefill shapes + squares | torch.matmul (cuBLAS) | geomean >= 1.0x, none below "
                        f"0.85x | {gm:.3f}x | 0.50x (1024x1024x1024) | 3 / 1 | no |")
    big = math.sqrt(1.2 * 1.1)
    assert table[3] == (f"| bf16 matmul, prefill shapes + squares, without 1024^3 and 2048^3 |  |  | {big:.3f}x | "
                        "1.10x (8192x8192x8192) | 2 / 0 |  |")
    assert len(table) == 4  # no other kernel, no ceilings: no memory rows


@pytest.mark.parametrize("speedups,met", [((1.0, 1.0), "yes"), ((1.3, 0.84), "no"), ((1.3, 0.85), "yes"),
                                          ((0.99, 1.0), "no")])
def test_goal_met_needs_the_geomean_and_the_minimum(speedups, met):
    rows = [_row(shape=s, ms=1.0, base=x) for s, x in zip(("4096x4096x8192", "8192x4096x4096"), speedups)]
    assert kernels.goals_table(rows, None)[2].endswith(f"| {met} |")


def test_weight_only_and_memory_bound_goals_against_the_cards_bandwidth():
    w4 = [_row("triton_w4a16", "1x4096x4096", "w4a16_g128", ms=1.0, base=3.5, bytes=3000e6),
          _row("triton_w4a16", "4x8192x8192", "w4a16_g128", ms=1.0, base=2.5, bytes=3300e6),
          _row("triton_w4a16_gemv", "16x8192x8192", "w4a16_g128", ms=1.0, base=3.2, bytes=3100e6),
          _row("triton_w4a16", "2048x4096x4096", "w4a16_g128", ms=1.0, base=0.95)]
    q = _row("triton_quantize", "4096x8192", "fp8_row", ms=1.0, base=None, bytes=3800e6)
    table = kernels.goals_table([*w4, q], CEILINGS)
    by_title = {line.split(" | ")[0][2:]: line for line in table[2:]}
    gm = (3.5 * 2.5 * 0.95) ** (1 / 3)
    assert by_title["W4A16 (g=128), same"] == (f"| W4A16 (g=128), same | bf16 torch.matmul | >= 3.0x | {gm:.3f}x | "
                                                "0.95x (2048x4096x4096) | 3 / 0 | no |")
    assert by_title["W4A16 (g=128), one-launch kernel (rows of the former w4a16_gemv kind)"].endswith(
        "| >= 3.0x | 3.200x | 3.20x (16x8192x8192) | 1 / 0 | yes |")
    # memory-bound: the best GB/s of quantize and GEMV rows over the measured copy bandwidth (4266 GB/s)
    best = 3800e6 / 1e-3 / 1e9  # the quantize row: 3800 GB/s
    assert by_title["any memory-bound kernel (quantize, GEMV)"] == (
        f"| any memory-bound kernel (quantize, GEMV) | measured copy 4266 GB/s | >= 85% | best {best / 4266:.0%} "
        f"(triton_quantize fp8_row 4096x8192) |  | 5 rows | yes |")
    # W4A16 decode (M <= 16) on the largest weight (8192 x 8192): the better of its two rows over the read 4306 GB/s
    assert by_title["W4A16 decode, largest weight: bytes / time"] == (
        f"| W4A16 decode, largest weight: bytes / time | measured read 4306 GB/s | >= 75% | {3300 / 4306:.0%} "
        "(triton_w4a16 4x8192x8192) |  | 2 rows | yes |")
    assert by_title["W4A16 prefill, M >= 2048"] == ("| W4A16 prefill, M >= 2048 | bf16 torch.matmul | >= 0.9x | "
                                                    "0.950x | 0.95x (2048x4096x4096) | 1 / 0 | yes |")


def test_card_line_names_the_card_commits_dates_and_ceilings():
    rows = [_row(measured_at="2026-11-02", env={"gpu": "NVIDIA H200", "sm_count": 132, "driver": "580",
                                                "sm_clock_MHz": 1980, "max_sm_clock_MHz": 1980, "torch": "2.11",
                                                "triton": "3.6", "cuda": "13.0", "git_commit": "bbb"}),
            _row(measured_at="2026-11-01", env={"git_commit": "aaa"})]
    line = kernels._env_line(rows, CEILINGS)
    head, ceil = line.split("\n\n")
    assert head == ("Card: **NVIDIA H200** (132 SMs, driver 580, SM clock 1980/1980 MHz); torch 2.11, triton 3.6, "
                    "CUDA 13.0; commits `aaa`, `bbb` (each row names its own); measured 2026-11-01 to 2026-11-02.")
    assert ceil == ("Ceilings on the same card (`mlsys bench ceilings`): matmul peak TFLOP/s bf16 784, fp8 1284, "
                    "tf32 354; HBM read 4306, write 4675, copy 4266 GB/s.")  # int8 0: left out
    assert "\n" not in kernels._env_line(rows, None)


def test_the_figure_bars_each_kernel_against_its_baseline(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, dpi=None: kept.append((fig, path, dpi)))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    rows = [_row(shape="4096x4096x4096", ms=0.2, base=0.25), _row(shape="1024x1024x1024", ms=0.01, base=None),
            _row("triton_matmul", "4096x4096x4096", "fp8_tensor", ms=0.1, base=0.12), _row(shape="8x8x8", ms=None)]
    kernels.plot(rows, tmp_path / "m.png", "tflops_per_s", "matmul: Triton vs torch baseline")
    (fig, path, dpi), = kept
    try:
        assert path == tmp_path / "m.png" and dpi == 110
        assert tuple(fig.get_size_inches()) == pytest.approx((11, 6.4))  # two groups
        bf16, fp8 = fig.axes
        assert bf16.get_title() == "triton_matmul bfloat16" and fp8.get_title() == "triton_matmul fp8_tensor"
        heights = [p.get_height() for p in bf16.patches]
        assert heights == pytest.approx([2 * 4096**3 / 0.2e-3 / 1e12, 2 * 1024**3 / 0.01e-3 / 1e12,
                                         2 * 4096**3 / 0.25e-3 / 1e12, 0])  # triton bars, then the baseline's
        assert [p.get_x() + p.get_width() / 2 for p in bf16.patches] == pytest.approx([-0.2, 0.8, 0.2, 1.2])
        assert [t.get_text() for t in bf16.get_xticklabels()] == ["4096x4096x4096", "1024x1024x1024"]
        assert bf16.get_ylabel() == "TFLOP/s"
        assert [t.get_text() for t in bf16.get_legend().get_texts()] == ["triton", "torch.matmul"]
        assert fig._suptitle.get_text() == "matmul: Triton vs torch baseline"
    finally:
        plt.close(fig)
    kept.clear()
    kernels.plot(rows[:1], tmp_path / "q.png", "GBps", "quant")
    fig = kept[0][0]
    try:
        assert fig.axes[0].get_ylabel() == "GB/s"
        assert fig.axes[0].get_title() == "triton_matmul bfloat16 (GB/s = the kernel's bytes / each time)"
    finally:
        plt.close(fig)


def test_quantize_reads_its_bf16_input_and_writes_the_rest():
    """On a card whose read and write bandwidths differ (an A100, no Hopper stream cap) the split of the row's
    bytes matters: the bf16 input M x N x 2 is read, the rest (codes and scales) written."""
    import json

    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.ops import predict_memory_op

    calibration = {**json.loads((Path(__file__).parents[1] / "reports/matmul/ceilings.json").read_text()),
                   "gpu": "NVIDIA A100-SXM4-80GB", "sm_count": 108,
                   "peak_flops": {"bf16": 280e12, "fp16": 280e12, "tf32": 140e12, "int8": 560e12},
                   "bandwidth_Bps": {"read": 1800e9, "write": 1500e9, "copy": 1600e9}}
    calibration.pop("matmul_runs")
    q = _row("triton_quantize", "4096x8192", "int8_row", ms=0.1, bytes=4096 * 8192 * 3.0 + 4096 * 4)
    kernels.add_predictions([q], calibration)
    ceil = load_ceilings(calibration=calibration)
    read = 4096 * 8192 * 2.0
    want = predict_memory_op("quantize", read, 4096 * 8192 * 1.0 + 4096 * 4, gpu=ceil).predicted_s * 1e3
    swapped = predict_memory_op("quantize", 4096 * 8192 * 1.0 + 4096 * 4, read, gpu=ceil).predicted_s * 1e3
    assert q.predicted_ms == pytest.approx(want, rel=1e-12) and abs(want - swapped) > 1e-3 * want


@pytest.mark.parametrize("speedups,met", [((4.0, 4.5), "yes"), ((3.99, 6.0), "no")])
def test_w8a8_goal_is_4x_on_every_square(speedups, met):
    rows = [_row("triton_w8a8", s, "int8_rowcol", ms=1.0, base=x) for s, x in zip(("4096x4096x4096", "8192x8192x8192"),
                                                                                 speedups)]
    (line,) = [x for x in kernels.goals_table(rows, None) if x.startswith("| W8A8")]
    assert line.startswith("| W8A8 int8 GEMM, 4096..8192 squares | torch._int_mm | >= 4x |") and line.endswith(f"| {met} |")
