"""The fused-kernels page (mlsyscalc/report/fused.py) on rows written by hand: the copy bandwidth it quotes, each
row's re-priced prediction, every cell of an op's table, the summary's medians, geomean, worst error and the
timing-floor adjustment, and the series of its figure."""

from __future__ import annotations

import statistics

import pytest

from mlsyscalc.bench.rows import Row
from mlsyscalc.report import fused

H100 = {"backend": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}


def _row(op="rmsnorm", pass_="fwd", tokens=1024, width=4096, ms=0.01, base=0.02, nbytes=None, **kw):
    nbytes = nbytes if nbytes is not None else 4.0 * tokens * width
    return Row(f"triton_{op}_{pass_}", "F.rms_norm", f"T{tokens}xW{width}", "bf16", ok=True, median_ms=ms,
               baseline_median_ms=base, bytes=nbytes,
               extra={"op": op, "pass": pass_, "tokens": tokens, "width": width, **kw.pop("extra", {})},
               env=kw.pop("env", H100), **kw).finish()


def test_copy_row_is_the_fastest_correct_copy():
    copies = [Row("torch_copy", "", s, "bf16", ok=ok, median_ms=ms, bytes=2e9).finish()
              for s, ok, ms in (("a", True, 1.0), ("b", True, 0.8), ("c", False, 0.5))]
    assert fused.copy_row(copies).shape == "b" and fused.copy_row([copies[2]]) is None
    assert fused.copy_row(copies).GBps == pytest.approx(2500)


def test_reprice_on_the_rows_card_with_predict_fused():
    from mlsyscalc.calc.roofline.fused_ops import predict_fused

    rows = [_row(ms=0.05), _row("rotary", "bwd", 2048, 128 * 32, extra={"head_dim": 128}),
            _row(ms=None), _row(env={"backend": "cpu"}), _row("unknown")]
    words = fused.reprice(rows, None)
    assert words == "H100-SXM, datasheet"
    want = predict_fused("rmsnorm_fwd", 1024, 4096, "bf16", "H100-SXM", None).predicted_s * 1e3
    assert rows[0].predicted_ms == pytest.approx(want, rel=1e-12)
    assert rows[0].prediction_error == pytest.approx((0.05 - want) / want, rel=1e-12)
    want = predict_fused("rotary_bwd", 2048, 4096, "bf16", "H100-SXM", None, head_dim=128).predicted_s * 1e3
    assert rows[1].predicted_ms == pytest.approx(want, rel=1e-12)
    assert all(r.predicted_ms is None for r in rows[2:])
    assert fused.reprice(rows[2:4], {"x": 1}) == "no matched card, folder's ceilings.json (`mlsys bench ceilings`)"


def test_op_table_cells_and_units():
    r = _row(ms=0.0125, base=0.025, nbytes=16.5e6, rel_err=3.2e-3, predicted_ms=0.01, error="e" * 100)
    r.finish()
    table = fused.op_table([r, _row(ms=None, base=None, error="OOM")], 3000.0)
    assert table[0].startswith("| shape | tokens x width | MB moved | ours us | ours GB/s | ours % copy | torch us |")
    # 16.5 MB / 12.5 us = 1320 GB/s (44% of 3000); torch 25 us: 660 GB/s (22%); 2.00x; +25% vs 10 us
    assert table[2] == (f"| T1024xW4096 | 4,194,304 | 16.50 | 12.5 | 1320 | 44% | 25.0 | 660 | 22% | 2.00x | 10.0 | +25% "
                        f"| 3.2e-03 | {'e' * 80} |")
    assert table[3] == "| T1024xW4096 | 4,194,304 | 16.78 | - | - | - | - | - | - | - | - | - | - | OOM |"
    assert fused.op_table([r], None)[2].split(" | ")[5] == "-"


def test_floor_adjusted_errors_add_the_smallest_rows_excess():
    small = _row(ms=0.010, predicted_ms=0.004, nbytes=0.5e6)  # 6 us beyond its price: the timing's floor
    a = _row(ms=0.030, predicted_ms=0.020, nbytes=40e6)
    b = _row(ms=0.100, predicted_ms=0.100, nbytes=80e6)
    assert fused.floor_adjusted([a, small, b]) == pytest.approx([0.030 / 0.026 - 1, 0.100 / 0.106 - 1])
    fast = _row(ms=0.003, predicted_ms=0.004, nbytes=0.5e6)  # faster than priced: no floor added
    assert fused.floor_adjusted([fast, a]) == pytest.approx([0.5])
    assert fused.floor_adjusted([a]) == [] and fused.floor_adjusted([a, _row(ms=0.02)]) == []


def test_summary_line_per_op_and_pass():
    rows = [_row(ms=0.010, base=0.020, nbytes=0.5e6, predicted_ms=0.004),
            _row(tokens=8192, ms=0.040, base=0.050, nbytes=80e6, predicted_ms=0.032),  # 2000 GB/s, torch 1600
            _row(tokens=16384, ms=0.050, base=0.100, nbytes=120e6, predicted_ms=0.050),  # 2400 GB/s, torch 1200
            _row(tokens=32768, ms=None, base=None, error="OOM")]
    for r in rows:
        r.finish()
    table = fused.summary_table(rows, 3000.0)
    assert table[0] == ("| op, pass | timed / failed | ours GB/s (median, >= 64 MB) | % copy | torch GB/s (same) | "
                        "torch us / ours (geomean) | median abs(error) | worst error (shape) | within 15%, timing floor "
                        "added | worst, floor added |")
    gm = (2.0 * 1.25 * 2.0) ** (1 / 3)
    errors = sorted([0.010 / 0.004 - 1, 0.040 / 0.032 - 1, 0.0])
    adjusted = [0.040 / 0.038 - 1, 0.050 / 0.056 - 1]  # floor 6 us added to the two larger rows
    assert table[2] == (f"| rmsnorm fwd | 3 / 1 | 2200 | 73% | 1400 | {gm:.2f}x | {100 * statistics.median(errors):.0f}% | "
                        f"+150% (T1024xW4096) | 2 / 2 | {100 * max(abs(e) for e in adjusted):.0f}% |")
    assert len(table) == 3  # no other op has rows


def test_figure_plots_ours_and_torch_against_bytes(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, dpi=None: kept.append((fig, path, dpi)))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    rows = [_row(tokens=8192, ms=0.04, base=0.05, nbytes=80e6), _row(tokens=1024, ms=0.01, base=0.02, nbytes=10e6),
            _row(pass_="bwd", ms=0.02, base=0.03, nbytes=20e6), _row("swiglu", ms=0.01, base=0.01, nbytes=30e6),
            _row("geglu", ms=0.01, base=0.01, nbytes=30e6)]
    fused.plot(rows, 3000.0, tmp_path / "g.png")
    (fig, path, dpi), = kept
    try:
        assert dpi == 110 and tuple(fig.get_size_inches()) == pytest.approx((12, 6.8))  # 3 ops: 2 rows of 2
        rms, swiglu, geglu, empty = fig.axes
        assert [ax.get_title() for ax in (rms, swiglu, geglu)] == ["rmsnorm", "swiglu", "geglu"]
        assert not empty.axison
        lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in rms.get_lines()}
        assert lines["ours fwd"] == ([10e6, 80e6], pytest.approx([1000, 2000]))  # sorted by bytes
        assert lines["torch fwd"] == ([10e6, 80e6], pytest.approx([500, 1600]))
        assert lines["ours bwd"] == ([20e6], pytest.approx([1000]))
        assert list(lines["copy"][1]) == [3000, 3000]
        assert rms.get_xscale() == "log" and rms.get_xlabel() == "bytes moved (fewest)" and rms.get_ylabel() == "GB/s"
    finally:
        plt.close(fig)
    assert fused.LARGE_BYTES == 64e6
