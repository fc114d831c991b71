"""The attention page (mlsyscalc/report/attention.py) on rows written by hand: the forward/backward goal rows
(ratios, marks, extra head sizes), the decode rows against SDPA and the read bandwidth, and the series of its
TFLOP/s figure (which rows each line takes, at which sequence length)."""

from __future__ import annotations

import pytest

from mlsyscalc.bench.rows import Row
from mlsyscalc.report import attention


def _row(kernel, shape, variant="full", ms=1.0, flops=None, nbytes=None, base=None, **kw):
    return Row(kernel, "sdpa_flash", shape, "bf16", variant, ok=True, median_ms=ms, flops=flops, bytes=nbytes,
               baseline_median_ms=base, **kw).finish()


def test_shape_labels_parse():
    assert attention.seq_of("B4xH32xKV32xS4096xD128") == 4096
    assert attention.kv_of("B64xH32xKV8xn_q1x4096xD128") == (8, 4096)


def test_forward_goal_rows_ratio_marks_and_extra_head_sizes():
    s1, s2, d64 = "B4xH32xKV32xS4096xD128", "B1xH32xKV32xS16384xD128", "B4xH32xKV32xS4096xD64"
    rows = [_row("triton_fwd", s1, ms=1.0, flops=500e9, base=1.5),  # 500 TFLOP/s, FLASH 333, 1.5x
            _row("sdpa_cudnn", s1, ms=1.25, flops=500e9), _row("sdpa_efficient", s1, ms=2.0, flops=500e9),
            _row("triton_fwd", s2, ms=1.0, flops=300e9, base=1.2),  # 1.2x: missed 1.4 by 14%
            _row("triton_fwd", d64, ms=1.0, flops=200e9, base=2.0),
            _row("triton_fwd", s1, "causal", ms=None)]  # untimed: a row of dashes
    body, ratios = attention.prefill_table(rows, "triton_fwd", "", 1.4)
    assert ratios == pytest.approx([1.5, 2.0, 1.2])
    assert body == [[s1, "causal", "-", "-", "-", "-", "-", "-", ""],  # by mask (causal, full), length, label
                    [s1, "full", "500", "333", "400", "250", "1.50x", "1.25x", "met"],
                    [d64, "full", "200", "100", "-", "-", "2.00x", "-", "(extra: d = 64) met"],
                    [s2, "full", "300", "250", "-", "-", "1.20x", "-", "missed by 14%"]]


def test_backward_rows_read_the_bwd_baselines():
    s = "B4xH32xKV32xS4096xD128"
    rows = [_row("triton_bwd", s, ms=2.0, flops=1000e9, base=2.0), _row("sdpa_cudnn_bwd", s, ms=1.0, flops=1000e9),
            _row("sdpa_cudnn", s, ms=0.1, flops=1000e9)]  # the forward's cuDNN row is not the backward's
    body, ratios = attention.prefill_table(rows, "triton_bwd", "_bwd", 1.0)
    assert body == [[s, "full", "500", "500", "1,000", "-", "1.00x", "0.50x", "met"]] and ratios == [1.0]


def test_decode_rows_against_sdpa_and_the_read_bandwidth():
    s = "B64xH32xKV8xn_q1x4096xD128"
    rows = [_row("sdpa_flash", s, "contiguous", ms=0.5), _row("sdpa_math", s, "contiguous", ms=0.8),
            _row("sdpa_cudnn", s, "contiguous", ms=0.25),
            _row("triton_decode", s, "contiguous", ms=0.4, nbytes=1.6e9, extra={"host_us": 30, "baseline_host_us": 20}),
            _row("triton_decode", s, "paged16", ms=0.5, nbytes=1.6e9, extra={"host_us": 31, "baseline_host_us": 9})]
    body = attention.decode_table(rows, 4000.0)
    # 1.6 GB / 0.4 ms = 4000 GB/s = 100% of read; vs FLASH/MATH 0.5 / 0.4; vs best (cuDNN) 0.25 / 0.4
    assert body == [[s, "contiguous", "0.400", "4,000", "100%", "1.25x", "0.62x", "30", "20", "met"],
                    [s, "paged16", "0.500", "3,200", "80%", "1.00x", "0.50x", "31", "-", "missed"]]
    assert attention.decode_table(rows, None)[0][4] == "-" and attention.decode_table(rows, None)[0][9] == "missed"


def test_the_figure_plots_each_backend_at_the_goal_shapes(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, dpi=None: kept.append((fig, path, dpi)))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    goal = ["B4xH32xKV32xS4096xD128", "B2xH32xKV32xS8192xD128"]  # B x S = 16k, d 128, 32 KV heads
    off = ["B8xH32xKV32xS4096xD128", "B4xH32xKV32xS4096xD64", "B4xH32xKV8xS4096xD128"]
    rows = []
    for i, s in enumerate(goal + off):
        rows += [_row("triton_fwd", s, ms=1.0, flops=(400 + i) * 1e9, base=1.25),
                 _row("sdpa_cudnn", s, ms=1.0, flops=(300 + i) * 1e9),
                 _row("triton_bwd", s, "causal", ms=1.0, flops=(200 + i) * 1e9, base=2.0),
                 _row("sdpa_cudnn_bwd", s, "causal", ms=1.0, flops=(100 + i) * 1e9)]
    attention.plot(rows, tmp_path / "a.png")
    (fig, path, dpi), = kept
    try:
        assert path == tmp_path / "a.png" and dpi == 110 and tuple(fig.get_size_inches()) == (11, 8)
        fwd_full, fwd_causal, bwd_full, bwd_causal = fig.axes
        lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in fwd_full.get_lines()}
        assert lines == {"triton": ([4096, 8192], pytest.approx([400, 401])),
                         "sdpa_flash": ([4096, 8192], pytest.approx([320, 320.8])),  # 400 / 1.25 from the row
                         "sdpa_cudnn": ([4096, 8192], pytest.approx([300, 301]))}
        assert [ln.get_linewidth() for ln in fwd_full.get_lines()] == [2.5, 1.2, 1.2]
        lines = {ln.get_label(): list(ln.get_ydata()) for ln in bwd_causal.get_lines()}
        assert lines == {"triton": pytest.approx([200, 201]), "sdpa_flash": pytest.approx([100, 100.5]),
                         "sdpa_cudnn": pytest.approx([100, 101])}
        assert not fwd_causal.get_lines() and not bwd_full.get_lines() and fwd_causal.get_legend() is None
        assert fwd_full.get_title() == "forward, full: bf16, d=128, H=32, B*S=16k"
        assert bwd_causal.get_title() == "backward, causal: bf16, d=128, H=32, B*S=16k"
        assert fwd_full.get_xscale() == "log" and fwd_full.xaxis.get_transform().base == 2
        assert fwd_full.get_ylabel() == "TFLOP/s" and bwd_full.get_xlabel() == "sequence length"
    finally:
        plt.close(fig)


def test_page_summary_gives_the_range_of_each_ratio(tmp_path, monkeypatch):
    from mlsyscalc.bench.rows import ResultStore

    monkeypatch.setattr(attention, "plot", lambda rows, path: None)
    store = ResultStore(tmp_path / "rows.jsonl")
    env = {"gpu": "NVIDIA H200", "sm_count": 132, "git_commit": "abc"}
    for s, fwd, bwd in (("B4xH32xKV32xS4096xD128", 1.5, 0.9), ("B1xH32xKV32xS16384xD128", 1.2, 1.1),
                        ("B2xH32xKV32xS8192xD128", 1.7, 1.0)):
        store.append(_row("triton_fwd", s, ms=1.0, flops=1e12, base=fwd, env=env, measured_at="2026-11-01"))
        store.append(_row("triton_bwd", s, ms=1.0, flops=1e12, base=bwd, env=env, measured_at="2026-11-02"))
    text = attention.write(tmp_path, "mlsys bench report r").read_text()
    assert "Summary: forward Triton/FLASH 1.20..1.70x, backward 0.90..1.10x." in text
    assert "measured 2026-11-01 to 2026-11-02." in text and "Card: NVIDIA H200 (132 SMs" in text
    assert text.rstrip().endswith("None.")  # no failed rows
