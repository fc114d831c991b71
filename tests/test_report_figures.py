"""What each figure of mlsyscalc/report/ holds, read from its matplotlib objects (never from pixels): which
series it plots with which values, axis labels, units and scales, legend entries, titles and layout.

Every figure writer ends in `save(fig, paths, ...)`; the `figures` fixture replaces it in the module under
test, so the figure is kept open for reading and nothing is rendered. Expected values come from the inputs by
hand (or from the calc function the figure is meant to show), never from the figure code itself.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

pytest.importorskip("matplotlib")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from mlsyscalc.calc.roofline.calibration import datasheet_ceilings  # noqa: E402
from mlsyscalc.calc.roofline.ops import OpPrediction  # noqa: E402

H100_BW = 3.35e12  # H100 SXM datasheet HBM3 bandwidth, B/s
H100_PEAKS = {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp8": 1979e12, "int8": 1979e12}


@pytest.fixture
def figures(monkeypatch):
    """figures(module) -> list of dicts (fig, paths, dpi, tight) that the module's `save` received."""
    import matplotlib.pyplot as plt

    saved: list[dict] = []

    def capture(module):
        def fake_save(fig, paths, dpi=120, tight=True):
            saved.append({"fig": fig, "paths": list(paths), "dpi": dpi, "tight": tight})
            return list(paths)

        monkeypatch.setattr(module, "save", fake_save)
        return saved

    yield capture
    for s in saved:
        plt.close(s["fig"])


def _lines(ax, style=None):
    return [ln for ln in ax.get_lines() if style is None or ln.get_linestyle() == style]


def _xy(line):
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


def _points(lines):
    """The first (x, y) of each line, flattened: [x0, y0, x1, y1, ...] for pytest.approx."""
    return [float(v) for ln in lines for v in (_xy(ln)[0][0], _xy(ln)[1][0])]


def _legend_texts(ax):
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def _op(name, flops, read, write, compute_s, memory_s, overhead_s=0.0, dtype="bf16", shape="s"):
    return OpPrediction(name, "matmul", dtype, flops, read, write, compute_s, memory_s, overhead_s, 0.0, 1.0,
                        shape=shape)


# --- roofline_plots ---------------------------------------------------------------------------------------------

def test_roofline_holds_the_datasheet_and_achievable_roofs_and_each_kernel(tmp_path, figures):
    from mlsyscalc.report import roofline_plots

    saved = figures(roofline_plots)
    ceil = datasheet_ceilings("h100")
    a = _op("a", 2e9, 1e6, 1e6, 1e-3, 5e-4, shape="8x8x8")  # intensity 1000, 2e12 FLOP/s, compute-bound
    b = _op("b", 1e6, 4e6, 4e6, 1e-6, 4e-6, shape="1x1x1")  # intensity 0.125, 2.5e11 FLOP/s, memory-bound
    out = roofline_plots.plot_roofline(ceil, [a, b], tmp_path / "r.svg")
    assert out == tmp_path / "r.svg" and saved[0]["paths"] == [out] and saved[0]["dpi"] == 140
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (10, 6)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "arithmetic intensity (FLOP / byte of HBM traffic)"
    assert ax.get_ylabel() == "attained FLOP/s (FLOPs / predicted time)"
    assert ax.get_title() == "Roofline of a 8x8x8 (bf16), b 1x1x1 (bf16) on H100-SXM (datasheet)"

    # dashed datasheet roofs: one per distinct peak (fp8 and int8 share one), min(peak, datasheet bw * x)
    dashed = _lines(ax, "--")
    assert len(dashed) == 4
    low, high = min(0.1, 0.125 / 3), max(1e4, 1000 * 3)  # x range: a third below/3x above the kernels
    for line, peak in zip(dashed, (67e12, 494.5e12, 989.5e12, 1979e12)):
        x, y = _xy(line)
        assert len(x) == 400 and x[0] == pytest.approx(low) and x[-1] == pytest.approx(high)
        assert np.allclose(y, np.minimum(peak, H100_BW * x), rtol=1e-12)
    assert dashed[0].get_label() == "datasheet roofs, TFLOP/s: fp8/int8 1979, bf16 990, tf32 494, fp32 67"
    assert all(ln.get_label().startswith("_") for ln in dashed[1:])  # one legend entry for all of them
    # the ridge dot of each datasheet roof at (peak / bw, peak)
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markersize() == 3]
    assert _points(dots) == pytest.approx([v for p in (67e12, 494.5e12, 989.5e12, 1979e12) for v in (p / H100_BW, p)])

    # the solid achievable bf16 roof: 989.5 T x 0.74 (matmul) and 3.35 TB/s x 0.89 (memory), its ridge dotted
    flops, bw = 989.5e12 * 0.74, 3.35e12 * 0.89
    solid = [ln for ln in _lines(ax, "-") if ln.get_linewidth() == 2]
    assert len(solid) == 1
    x, y = _xy(solid[0])
    assert np.allclose(y, np.minimum(flops, bw * x), rtol=1e-12)
    assert solid[0].get_label() == ("achievable bf16 matmul: 732 TFLOP/s, 2.98 TB/s, ridge 246 FLOP/B (dotted)")
    ridge = [ln for ln in _lines(ax, ":")]
    assert len(ridge) == 1 and _xy(ridge[0])[0] == pytest.approx([flops / bw, flops / bw])

    # kernels: (FLOPs / bytes, FLOPs / predicted time), red when compute-bound, green when memory-bound
    points = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markersize() == 6]
    assert _points(points) == pytest.approx([1000, 2e12, 0.125, 2.5e11])
    assert [p.get_color() for p in points] == ["tab:red", "tab:green"]
    assert [p.get_label() for p in points] == ["compute-bound", "memory-bound"]
    # two groups: direct labels beside each point
    notes = [(t.get_text(), t.xy, t.xyann, t.get_fontsize()) for t in ax.texts]
    assert notes == [("a", (1000, 2e12), (6, -10), 7), ("b", (0.125, 2.5e11), (6, -10), 7)]
    assert _legend_texts(ax) == [dashed[0].get_label(), solid[0].get_label(), "compute-bound", "memory-bound"]
    assert ax.get_legend()._loc == 2  # upper left


def test_roofline_title_of_many_kernels_and_zero_flop_kernels_left_out(tmp_path, figures):
    from mlsyscalc.report import roofline_plots

    saved = figures(roofline_plots)
    ceil = datasheet_ceilings("h100")
    ops = [_op(f"k{i}", 10.0 ** (6 + i), 1e6, 1e6, 1e-3, 1e-4) for i in range(3)]
    copy = _op("copy", 0.0, 1e6, 1e6, 0.0, 1e-4)  # no FLOPs: no point on a log axis
    roofline_plots.plot_roofline(ceil, [*ops, copy], tmp_path / "r.png", labels=["x", "y", "z", "w"])
    ax = saved[0]["fig"].axes[0]
    assert ax.get_title() == "Roofline of k0 s (bf16), k1 s (bf16), k2 s (bf16), ... on H100-SXM (datasheet)"
    points = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markersize() == 6]
    assert [_xy(p)[0][0] for p in points] == pytest.approx([0.5, 5, 50])
    assert [t.get_text() for t in ax.texts] == ["x", "y", "z"]  # the labels given, not the names
    # the x range reaches 1/3 of the smallest intensity when that is under 0.1 * 3
    assert _xy(_lines(ax, "--")[0])[0][0] == pytest.approx(0.1)
    roofline_plots.plot_roofline(ceil, ops, tmp_path / "t.png", title="mine", dtype="fp8")
    ax = saved[1]["fig"].axes[0]
    assert ax.get_title() == "mine"
    solid = [ln for ln in _lines(ax, "-") if ln.get_linewidth() == 2][0]
    assert solid.get_label().startswith("achievable fp8 matmul: 1286 TFLOP/s")  # 1979 T x 0.65 (matmul_fp8)


def test_nearby_kernels_share_one_label_and_many_are_numbered_with_a_key():
    import matplotlib.pyplot as plt

    from mlsyscalc.report import roofline_plots

    # a and b within 15% in both axes (one label "a, b"); c, d, e apart; five groups -> numbered key
    ops = [_op("a", 1e9, 5e5, 5e5, 1e-3, 1e-4), _op("b", 1.1e9, 5e5, 5e5, 1.05e-3, 1e-4),
           _op("c", 1e6, 5e5, 5e5, 1e-6, 1e-4), _op("d", 1e12, 5e5, 5e5, 1.0, 1e-4),
           _op("e", 1e8, 5e5, 5e5, 1e-5, 1e-4)]
    groups = roofline_plots._clusters(ops, [o.name for o in ops])
    assert [g[2] for g in groups] == ["a, b", "c", "d", "e"]
    assert groups[0][:2] == pytest.approx((1000, 1e12))  # the first member's point
    fig, (ax, key) = plt.subplots(1, 2)
    try:
        roofline_plots._draw_points(ax, ops[2:] + ops[:2] + [_op("f", 1e10, 5e5, 5e5, 1e-4, 1e-4)],
                                    ["c", "d", "e", "a", "b", "f"], key)
        numbers = [(t.get_text(), t.xy[0], t.xyann) for t in ax.texts]
        # numbered by intensity, alternately above (odd) and below (even)
        assert numbers == [("1", pytest.approx(1), (4, 4)), ("2", pytest.approx(100), (4, -10)),
                           ("3", pytest.approx(1000), (4, 4)), ("4", pytest.approx(1e4), (4, -10)),
                           ("5", pytest.approx(1e6), (4, 4))]
        assert not key.axison
        assert key.texts[0].get_text() == "kernels\n1: c\n2: e\n3: a, b\n4: f\n5: d"
    finally:
        plt.close(fig)
    assert roofline_plots.DIRECT_LABELS == 3 and roofline_plots.MAX_LABELS == 30


def test_a_long_key_entry_wraps_at_the_key_width():
    import matplotlib.pyplot as plt

    from mlsyscalc.report import roofline_plots

    names = [f"kernel_number_{i}_" + "x" * 40 for i in range(4)]
    ops = [_op(n, 10.0 ** (6 + 2 * i), 5e5, 5e5, 1e-3, 1e-4) for i, n in enumerate(names)]
    fig, ax = plt.subplots()
    try:
        roofline_plots._draw_points(ax, ops, names)  # no key axes: the key beside the roofline
        key = ax.texts[-1]
        assert key.get_position() == (1.02, 1.0)
        lines = key.get_text().split("\n")
        assert max(len(line) for line in lines) <= 44 and lines[0].startswith("1: kernel_number_0_")
        assert lines[1].startswith("    ")  # continuation lines indented
    finally:
        plt.close(fig)


def _model_result(phase="decode", tp=1):
    ceil = datasheet_ceilings("h100")
    rows = [SimpleNamespace(pred=_op("qkv", 4e9, 1e6, 1e6, 2e-3, 1e-4), layers="layers", pass_name="forward"),
            SimpleNamespace(pred=_op("lm_head", 2e6, 1e6, 1e6, 1e-6, 1e-4), layers="head", pass_name="forward"),
            SimpleNamespace(pred=_op("grad", 9e9, 1e6, 1e6, 1e-3, 1e-4), layers="layers", pass_name="backward")]
    options = SimpleNamespace(phase=phase, batch=4, seq=512, context=2048, dtype="bf16", compute_dtype="bf16", tp=tp)
    return SimpleNamespace(rows=rows, options=options, model="toy", gpu="H100-SXM", ceilings=ceil)


def test_model_figure_plots_forward_kernels_with_their_key_panel(tmp_path, figures):
    from mlsyscalc.report import roofline_plots

    saved = figures(roofline_plots)
    roofline_plots.plot_model(_model_result(), tmp_path / "m.svg")
    s = saved[0]
    assert s["dpi"] == 130 and tuple(s["fig"].get_size_inches()) == (13, 6.5)
    ax, key = s["fig"].axes
    assert list(ax.get_gridspec().get_width_ratios()) == [3, 1.2]
    assert ax.get_title() == ("toy decode kernels (batch 4, context 2048, bf16) on H100-SXM\nceilings: datasheet")
    points = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markersize() == 6]
    assert [_xy(p)[0][0] for p in points] == pytest.approx([2000, 1])  # the backward kernel left out
    assert [t.get_text() for t in ax.texts] == ["qkv", "lm_head (head)"]
    assert ax.get_legend() is None and not key.axison
    legend = [t.get_text() for t in key.get_legend().get_texts()]
    assert legend[-2:] == ["compute-bound", "memory-bound"] and legend[1].startswith("achievable bf16 matmul")
    assert all(len(line) <= 44 for text in legend for line in text.split("\n"))  # wrapped to the key width
    roofline_plots.plot_model(_model_result("prefill", tp=8), tmp_path / "p.svg")
    assert saved[1]["fig"].axes[0].get_title().startswith("toy prefill kernels (batch 4, seq 512, bf16) on "
                                                          "H100-SXM x8 (TP)\n")


def _sweep(cross):
    options = [SimpleNamespace(batch=b, phase="decode", context=128, seq=64, dtype="bf16", tp=2) for b in (1, 2, 4, 8)]
    points = [SimpleNamespace(options=o, time_s=t, tokens_per_s=o.batch / t, model="toy", gpu="H100-SXM")
              for o, t in zip(options, (1e-3, 1.1e-3, 1.3e-3, 2e-3))]
    return SimpleNamespace(points=points, compute_bound_batch=cross)


def test_sweep_panel_plots_throughput_and_latency_per_batch(tmp_path, figures):
    from mlsyscalc.report import roofline_plots

    saved = figures(roofline_plots)
    sweep = _sweep(cross=6)
    roofline_plots.plot_model(_model_result(), tmp_path / "s.svg", sweep=sweep)
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (20, 6.5)
    roof, key, left, right = fig.axes
    assert list(roof.get_gridspec().get_width_ratios()) == [3, 1.2, 3]
    (tps,) = [ln for ln in left.get_lines() if ln.get_marker() == "o"]
    assert list(tps.get_xdata()) == [1, 2, 4, 8]
    assert list(tps.get_ydata()) == pytest.approx([1000, 2 / 1.1e-3, 4 / 1.3e-3, 4000])
    assert tps.get_label() == "tokens/s" and tps.get_color() == "tab:blue"
    assert left.get_xscale() == "log" and left.get_yscale() == "log"
    assert left.xaxis.get_transform().base == 2
    assert left.get_xlabel() == "batch (sequences)" and left.get_ylabel() == "throughput (tokens/s)"
    (lat,) = right.get_lines()
    assert list(lat.get_ydata()) == pytest.approx([1.0, 1.1, 1.3, 2.0])  # ms
    assert lat.get_linestyle() == "--" and lat.get_marker() == "s"
    assert right.get_ylabel() == "latency per step (ms)" and right.get_ylim()[0] == 0
    (cross,) = [ln for ln in left.get_lines() if ln.get_linestyle() == ":"]
    assert list(cross.get_xdata()) == [6, 6]
    (note,) = left.texts
    assert note.get_text() == "compute-bound from batch 6" and note.xy[0] == 6 and note.xyann == (4, 8)
    assert note.get_fontsize() == 8 and left.title.get_fontsize() == 10
    assert note.xy[1] == left.get_ylim()[0]
    assert left.get_title() == ("toy decode (context 128, bf16) on H100-SXM x2 (TP):\n"
                                "throughput (solid) and latency (dashed) vs batch")


@pytest.mark.parametrize("cross,marked", [(None, False), (32, True), (33, False), (1, True)])
def test_sweep_marks_the_crossing_only_near_the_swept_batches(cross, marked):
    import matplotlib.pyplot as plt

    from mlsyscalc.report import roofline_plots

    fig, ax = plt.subplots()
    try:
        roofline_plots._sweep_axes(ax, _sweep(cross))  # batches 1..8: marked from 1 to 4 x 8
        assert bool([ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]) is marked
        assert len(ax.texts) == int(marked)
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        sweep = _sweep(cross)
        sweep.points = sweep.points[1:]  # batches 2..8: a crossing at 1 is before them
        roofline_plots._sweep_axes(ax, sweep)
        assert bool(ax.texts) is (marked and cross != 1)
    finally:
        plt.close(fig)


# --- serve_plots -------------------------------------------------------------------------------------------------

def _serve_result(scale=1.0):
    metrics = {}
    for key in ("ttft", "tpot", "e2e"):
        metrics.update({f"{key}_p50_s": scale * 0.1, f"{key}_p90_s": scale * 0.5, f"{key}_p99_s": scale * 0.9})
    return SimpleNamespace(metrics=metrics, model="toy", gpu="H100-SXM", options=SimpleNamespace(scheduler="vllm"),
                           latencies={"ttft": [0.3, 0.1, 0.2, 0.4], "tpot": [0.02, 0.01], "e2e": [5.0]})


def test_serving_sweep_plots_p50_and_p99_of_each_latency_against_rate(tmp_path, figures):
    from mlsyscalc.report import serve_plots

    saved = figures(serve_plots)
    serve_plots.plot_serving([_serve_result(1.0), _serve_result(2.0)], [1.0, 3.0], str(tmp_path / "s.png"))
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (13, 3.8) and len(fig.axes) == 3
    assert fig._suptitle.get_text() == "toy on H100-SXM, vllm (mlsys serve, simulated)"
    for ax, label in zip(fig.axes, ("TTFT", "TPOT", "end-to-end")):
        p50, p99 = ax.get_lines()
        assert list(p50.get_xdata()) == [1.0, 3.0] and list(p50.get_ydata()) == pytest.approx([0.1, 0.2])
        assert list(p99.get_ydata()) == pytest.approx([0.9, 1.8])  # p99, not p90
        assert (p50.get_label(), p99.get_label()) == ("p50", "p99")
        assert (p50.get_linestyle(), p99.get_linestyle()) == ("-", "--")
        assert ax.get_title() == label and ax.get_ylabel() == f"{label} (s)"
        assert ax.get_xlabel() == "arrival rate (requests/s)" and ax.get_yscale() == "log"
        assert _legend_texts(ax) == ["p50", "p99"]


def test_one_serving_run_plots_each_latency_cdf(tmp_path, figures):
    from mlsyscalc.report import serve_plots

    saved = figures(serve_plots)
    serve_plots.plot_serving([_serve_result()], [], str(tmp_path / "s.svg"))
    axes = saved[0]["fig"].axes
    (ttft,), (tpot,), (e2e,) = (ax.get_lines() for ax in axes)
    assert list(ttft.get_xdata()) == [0.1, 0.2, 0.3, 0.4] and list(ttft.get_ydata()) == [0.25, 0.5, 0.75, 1.0]
    assert list(tpot.get_xdata()) == [0.01, 0.02] and list(tpot.get_ydata()) == [0.5, 1.0]
    assert list(e2e.get_ydata()) == [1.0]
    assert [ax.get_xlabel() for ax in axes] == ["TTFT (s)", "TPOT (s)", "end-to-end (s)"]
    assert all(ax.get_ylabel() == "fraction of requests" and ax.get_yscale() == "linear" for ax in axes)
    assert all(ax.get_legend() is None for ax in axes)


# --- compare_plot ------------------------------------------------------------------------------------------------

def _bars(ax):
    return [(p.get_x() + p.get_width() / 2, p.get_height(), matplotlib.colors.to_hex(p.get_facecolor()))
            for p in ax.patches]


def test_compare_plot_bars_each_card_and_its_cost(tmp_path, figures):
    from mlsyscalc.report import compare_plot

    saved = figures(compare_plot)
    data = {"task": "train", "model": "toy", "cards": [
        {"card": "h100", "step_time_s": 2.0, "fits": True, "cost": {"cost_per_step": 0.5}},
        {"card": "a100", "step_time_s": 5.0, "fits": False, "cost": None},
        {"card": "b200", "step_time_s": 1.0, "fits": None, "cost": {"cost_per_step": 0.25}},
        {"card": "bad", "error": "no such card"}]}
    compare_plot.plot_compare(data, str(tmp_path / "c.png"))
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (11, 3.8)
    left, right = fig.axes
    assert [h for _, h, _ in _bars(left)] == [2.0, 5.0, 1.0]
    assert [c for _, _, c in _bars(left)] == ["#1f77b4", "#d62728", "#1f77b4"]  # red: does not fit
    assert [t.get_text() for t in left.get_xticklabels()] == ["h100", "a100", "b200"]
    assert left.get_ylabel() == "step time (s)" and left.get_title() == "step time (s) (red: does not fit)"
    assert [h for _, h, _ in _bars(right)] == [0.5, 0.25]
    assert [t.get_text() for t in right.get_xticklabels()] == ["h100", "b200"]
    assert right.get_ylabel() == "cost per step (price units)" and right.get_title() == "cost"
    assert fig._suptitle.get_text() == ("toy: train on each card (mlsys compare, datasheet ceilings unless "
                                        "calibrated)")


def test_compare_plot_of_memory_in_gb_with_the_usable_mark(tmp_path, figures):
    from mlsyscalc.report import compare_plot

    saved = figures(compare_plot)
    data = {"task": "memory", "model": "toy", "cards": [
        {"card": "h100", "total_bytes": 30e9, "usable_bytes": 76e9, "fits": True},
        {"card": "l4", "total_bytes": 30e9, "usable_bytes": 20e9, "fits": False}]}
    compare_plot.plot_compare(data, str(tmp_path / "c.png"))
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (6, 3.8) and len(fig.axes) == 1
    (ax,) = fig.axes
    assert [h for _, h, _ in _bars(ax)] == pytest.approx([30, 30])  # GB, as the label says
    assert ax.get_ylabel() == "inference memory per GPU (GB)"
    (usable,) = ax.get_lines()
    assert list(usable.get_ydata()) == pytest.approx([76, 20]) and usable.get_label() == "usable"
    serve = {"task": "serve", "model": "toy", "cards": [
        {"card": "h100", "tpot_p50_s": 0.02, "fits": True, "cost": {"cost_per_million_output_tokens": 3.0}}]}
    compare_plot.plot_compare(serve, str(tmp_path / "s.png"))
    left, right = saved[1]["fig"].axes
    assert [h for _, h, _ in _bars(left)] == [0.02] and left.get_ylabel() == "p50 TPOT (s)"
    assert [h for _, h, _ in _bars(right)] == [3.0]
    assert right.get_ylabel() == "cost per million output tokens (price units)"


# --- memory_plot --------------------------------------------------------------------------------------------------

def test_memory_sweep_stacks_each_part_in_gib(tmp_path, figures):
    from mlsyscalc.report import memory_plot

    saved = figures(memory_plot)
    gib = 2**30
    breakdowns = [{"weights_bytes": 2 * gib, "kv_cache_bytes": gib}, {"weights_bytes": gib, "kv_cache_bytes": 3 * gib}]
    out = memory_plot.plot_breakdowns(str(tmp_path / "m.pdf"), "title here", "dtype", ["bf16", "fp8"], breakdowns,
                                      capacity_bytes=80 * gib)
    assert out == str(tmp_path / "m.pdf")
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (6.0, 4.5)  # max(6, 1.2 x 2 + 3)
    (ax,) = fig.axes
    bars = [(p.get_x() + p.get_width() / 2, p.get_y(), p.get_height()) for p in ax.patches]
    assert bars == [(0, 0, 2), (1, 0, 1), (0, 2, 1), (1, 1, 3)]  # weights, then KV on top of them
    (cap,) = ax.get_lines()
    assert list(cap.get_ydata()) == [80, 80] and cap.get_label() == "usable GPU memory"
    assert _legend_texts(ax) == ["usable GPU memory", "weights", "kv_cache"]
    assert ax.get_xlabel() == "weights dtype" and ax.get_ylabel() == "per-GPU memory (GiB)"
    assert ax.get_title() == "title here"
    labels = [f"z{i}" for i in range(5)]
    memory_plot.plot_breakdowns(str(tmp_path / "z.png"), "t", "zero", labels, [{"a_bytes": gib}] * 5)
    fig = saved[1]["fig"]
    assert tuple(fig.get_size_inches()) == pytest.approx((9.0, 4.5))  # 1.2 x 5 + 3
    assert fig.axes[0].get_xlabel() == "ZeRO stage" and not fig.axes[0].get_lines()


# --- scaling_plots ------------------------------------------------------------------------------------------------

def test_frontier_panels_plot_each_law_and_the_marked_point(tmp_path, figures):
    from mlsyscalc.calc.scaling.laws import LAW_NAMES, get_law, loss_model
    from mlsyscalc.report import scaling_plots

    saved = figures(scaling_plots)
    point = (1e22, 2e9, 8e11)
    first, loss_name = "approach1", "approach3"  # a law without a loss model, shown on one with
    scaling_plots.plot_frontier(str(tmp_path / "f.svg"), first, loss_name, point=point)
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (13, 5.2)
    left, right = fig.axes
    # right: N_opt (solid) and D_opt (dashed) of every law over C = 1e18 .. 1e28, `first` first
    c = np.logspace(18, 28, 100)
    names = [first, *[n for n in LAW_NAMES if n != first]]
    curves = right.get_lines()[:2 * len(names)]
    for i, name in enumerate(names):
        n_line, d_line = curves[2 * i], curves[2 * i + 1]
        law = get_law(name)
        assert np.allclose(n_line.get_xdata(), c) and np.allclose(n_line.get_ydata(), law.params_for_compute(c))
        assert np.allclose(d_line.get_ydata(), law.tokens_for_compute(c))
        assert (n_line.get_label(), d_line.get_label()) == (f"{name} N_opt", f"{name} D_opt")
        assert d_line.get_linestyle() == "--" and d_line.get_color() == n_line.get_color()
    n_mark, d_mark = right.get_lines()[2 * len(names):]
    assert (_xy(n_mark)[0][0], _xy(n_mark)[1][0]) == (1e22, 2e9) and n_mark.get_label() == "this point: N"
    assert (_xy(d_mark)[0][0], _xy(d_mark)[1][0]) == (1e22, 8e11) and d_mark.get_label() == "this point: D"
    assert right.get_xscale() == right.get_yscale() == "log"
    assert right.get_xlabel() == "training compute C (FLOP)" and right.get_ylabel() == "parameters N, tokens D (count)"
    assert right.get_title() == "Compute-optimal frontier (C = 6ND)"
    # left: loss against N at 5 budgets 1e20 .. 1e24 around the point's compute, 200 N each over 10^+-1.5 N_best
    model, loss_law, law = loss_model(loss_name), get_law(loss_name), get_law(first)
    lines = left.get_lines()
    curves = [ln for ln in lines if len(ln.get_xdata()) == 200]
    assert [ln.get_label() for ln in curves] == [f"C = {b:.2g} FLOP" for b in (1e20, 1e21, 1e22, 1e23, 1e24)]
    for line, budget in zip(curves, (1e20, 1e21, 1e22, 1e23, 1e24)):
        n_best = loss_law.params_for_compute(budget)
        x, y = _xy(line)
        assert x[0] == pytest.approx(n_best / 10**1.5) and x[-1] == pytest.approx(n_best * 10**1.5)
        assert np.allclose(y, model.loss(x, budget / (6 * x)))
    minima = [ln for ln in lines if ln.get_marker() == "o"]
    assert [_xy(m)[0][0] for m in minima] == pytest.approx([loss_law.params_for_compute(b) for b in
                                                            (1e20, 1e21, 1e22, 1e23, 1e24)])
    crosses = [ln for ln in lines if ln.get_marker() == "x"]
    assert [_xy(m)[0][0] for m in crosses] == pytest.approx([law.params_for_compute(b) for b in
                                                             (1e20, 1e21, 1e22, 1e23, 1e24)])
    assert [m.get_label() for m in crosses][0] == f"{first} N_opt"
    (star,) = [ln for ln in lines if ln.get_marker() == "*"]
    assert (_xy(star)[0][0], _xy(star)[1][0]) == pytest.approx((2e9, float(model.loss(2e9, 8e11))))
    assert left.get_xlabel() == "parameters N" and left.get_ylabel() == f"loss ({loss_name}), nats/token"
    assert left.get_title() == f"IsoFLOP curves, o = minimum of {loss_name}"


def test_frontier_of_one_law_against_the_paper_table(tmp_path, figures):
    from mlsyscalc.calc.scaling.laws import CHINCHILLA_TABLE3
    from mlsyscalc.report import scaling_plots

    saved = figures(scaling_plots)
    name = "approach3"
    scaling_plots.plot_frontier(str(tmp_path / "p.svg"), [name], name, paper=True)
    left, right = saved[0]["fig"].axes
    assert [ln.get_label() for ln in right.get_lines()] == [f"{name} N_opt", f"{name} D_opt", "Table 3 N (paper)",
                                                            "Table 3 D (paper)"]
    n_tab, d_tab = right.get_lines()[2:]
    assert list(n_tab.get_xdata()) == [row[1] for row in CHINCHILLA_TABLE3]
    assert list(n_tab.get_ydata()) == [row[0] for row in CHINCHILLA_TABLE3]
    assert list(d_tab.get_ydata()) == [row[2] for row in CHINCHILLA_TABLE3]
    # no point: budgets centred on Table 3's Gopher row (5.76e23 FLOP); one law, no N_opt crosses
    curves = [ln for ln in left.get_lines() if len(ln.get_xdata()) == 200]
    assert [ln.get_label() for ln in curves] == [f"C = {5.76e23 * 10.0 ** k:.2g} FLOP" for k in (-2, -1, 0, 1, 2)]
    assert not [ln for ln in left.get_lines() if ln.get_marker() in ("x", "*")]
    with pytest.raises(Exception, match="unknown law"):
        scaling_plots.plot_frontier(str(tmp_path / "q.svg"), ["nope"], name)


def test_log_axes_under_a_decade_get_plain_labels():
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, NullLocator

    from mlsyscalc.report import scaling_plots

    fig, ax = plt.subplots()
    try:
        ax.plot([1e9, 1e12], [2.0, 3.0])
        ax.set_xlim(1e9, 1e12)
        ax.set_ylim(2.0, 19.9)  # under one decade
        scaling_plots._log_log(ax)
        assert ax.get_xscale() == ax.get_yscale() == "log"
        assert isinstance(ax.yaxis.get_major_locator(), MaxNLocator)
        assert isinstance(ax.yaxis.get_minor_locator(), NullLocator)
        assert not isinstance(ax.xaxis.get_major_locator(), MaxNLocator)
        ax.set_ylim(2.0, 20.0)  # exactly a decade: log ticks kept
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        ax.set_xlim(1.0, 10.0)
        ax.set_ylim(1.0, 9.99)
        scaling_plots._log_log(ax)
        assert not isinstance(ax.xaxis.get_major_locator(), MaxNLocator)
        assert isinstance(ax.yaxis.get_major_locator(), MaxNLocator)
    finally:
        plt.close(fig)


def _fit_result():
    # runs on two IsoFLOP budgets (1e18 and 1e19 FLOP), three sizes each, observed 1% above a fixed fit
    n = np.array([1e7, 3e7, 1e8, 3e7, 1e8, 3e8])
    c = np.array([1e18] * 3 + [1e19] * 3)
    d = c / (6 * n)
    loss_fit = SimpleNamespace(E=1.5, A=400.0, B=410.0, alpha=0.34, beta=0.28, k=0.1, a=0.5,
                               loss=lambda nn, dd: 1.5 + 400.0 / np.power(nn, 0.34) + 410.0 / np.power(dd, 0.28))
    runs = SimpleNamespace(params=list(n), tokens=list(d), loss=list(loss_fit.loss(n, d) * 1.01))
    return SimpleNamespace(fit=loss_fit, runs=runs), n, d, c


def test_fit_figure_plots_runs_fitted_curves_and_observed_against_fitted(tmp_path, figures):
    from mlsyscalc.report import scaling_plots

    saved = figures(scaling_plots)
    result, n, d, _ = _fit_result()
    scaling_plots.plot_fit(str(tmp_path / "fit.png"), result)
    fig = saved[0]["fig"]
    assert tuple(fig.get_size_inches()) == (13, 5.2)
    left, right = fig.axes[:2]
    runs = left.collections[0]
    assert np.allclose(runs.get_offsets(), np.column_stack([n, result.runs.loss]))
    assert np.allclose(runs.get_array(), 6 * n * d)  # coloured by compute 6ND
    assert runs.norm.vmin == pytest.approx(1e18) and runs.norm.vmax == pytest.approx(1e19)
    assert fig.axes[2].get_ylabel() == "compute 6ND (FLOP)"  # the colour bar
    curves = [ln for ln in left.get_lines() if len(ln.get_xdata()) == 200]
    assert len(curves) == 2
    for line, (budget, lo, hi) in zip(curves, ((1e18, 1e7, 1e8), (1e19, 3e7, 3e8))):
        x, y = _xy(line)
        assert x[0] == pytest.approx(lo / 1.5) and x[-1] == pytest.approx(hi * 1.5)
        assert np.allclose(y, result.fit.loss(x, budget / (6 * x)))
    optima = [ln for ln in left.get_lines() if ln.get_marker() == "o"]
    # N_opt = k C^a = 0.1 x 1e9 = 1e8 (in [1e7/1.5, 1.5e8]) and 0.1 x 10^9.5 = 3.16e8 (in [2e7, 4.5e8])
    assert [_xy(m)[0][0] for m in optima] == pytest.approx([1e8, 0.1 * 1e19 ** 0.5])
    assert left.get_xlabel() == "parameters N" and left.get_ylabel() == "loss, nats/token"
    predicted = result.fit.loss(n, d)
    assert np.allclose(right.collections[0].get_offsets(), np.column_stack([predicted, result.runs.loss]))
    for points in (runs, right.collections[0]):  # black-edged dots of size 18 in both panels
        assert list(points.get_sizes()) == [18] and list(points.get_linewidths()) == [0.3]
    (diag,) = right.get_lines()
    lims = [min(predicted.min(), min(result.runs.loss)), max(predicted.max(), max(result.runs.loss))]
    assert list(diag.get_xdata()) == pytest.approx(lims) and list(diag.get_ydata()) == pytest.approx(lims)
    assert diag.get_label() == "observed = fitted"
    assert right.get_xlabel() == "fitted loss, nats/token" and right.get_ylabel() == "observed loss, nats/token"
    assert right.get_title() == "E=1.5 A=400 B=410 alpha=0.34 beta=0.28"
    assert all(ax.get_xscale() == ax.get_yscale() == "log" for ax in (left, right))


def test_fit_optimum_outside_a_level_is_not_marked(tmp_path, figures):
    from mlsyscalc.report import scaling_plots

    saved = figures(scaling_plots)
    result, *_ = _fit_result()
    result.fit.k = 10.0  # N_opt = 1e10 and 3.2e10: beyond both levels' N range x 1.5
    scaling_plots.plot_fit(str(tmp_path / "fit.png"), result)
    assert not [ln for ln in saved[0]["fig"].axes[0].get_lines() if ln.get_marker() == "o"]


def test_compute_levels_group_runs_by_budget_or_into_five_bands():
    from mlsyscalc.report.scaling_plots import _compute_levels

    n = np.array([1e7, 2e7, 4e7, 1e8])
    c = np.array([1e18, 1e18, 1.1e19, 0.9e19])  # log10 rounded to 0.1: 18.0, 18.0, 19.0, 19.0
    levels = _compute_levels(n, c)
    assert levels == [pytest.approx((1e18, 1e7, 2e7)), pytest.approx((math.sqrt(1.1e19 * 0.9e19), 4e7, 1e8))]
    many = 10.0 ** (18 + 0.1 * np.arange(10))  # 10 distinct levels > 8: five equal bands of log10 C
    bands = _compute_levels(np.arange(1.0, 11.0), many)
    assert len(bands) == 5 and [b[1:] for b in bands] == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
    assert bands[0][0] == pytest.approx(10 ** 18.05)
    assert len(_compute_levels(np.arange(1.0, 9.0), 10.0 ** (18 + 0.1 * np.arange(8)))) == 8  # 8: kept


# --- model_report_figures: the report's figures, from the data its sections quote -------------------------------

GiB = 2**30


def _draw(figures, kind, data, title="a title"):
    from mlsyscalc.report import model_report_figures
    from mlsyscalc.report.model_report import Figure

    saved = figures(model_report_figures)
    model_report_figures.draw(Figure("name", kind, title, data), ["x.svg", "x.png"])
    s = saved[-1]
    assert s["paths"] == ["x.svg", "x.png"] and s["dpi"] == 100 and s["tight"] is False
    assert s["fig"]._suptitle.get_text() == title and s["fig"]._suptitle.get_fontsize() == 10
    return s["fig"]


def _margins(fig):
    p = fig.subplotpars
    return {"left": p.left, "right": p.right, "bottom": p.bottom, "top": p.top}


def test_report_memory_bars_stack_each_part_per_stage_and_recompute(figures):
    parts = ("weights", "gradients", "optimizer", "activations", "temporaries")
    bars = [{"zero": z, "recompute": r, **{p: (i + 1) * GiB * (2 if r == "full" else 1) for i, p in enumerate(parts)}}
            for z in (0, 3) for r in ("none", "full")]
    fig = _draw(figures, "memory_bars", {"bars": bars, "usable_bytes": 70 * GiB})
    assert tuple(fig.get_size_inches()) == (10, 5)
    assert _margins(fig) == pytest.approx({"left": 0.08, "right": 0.8, "bottom": 0.14, "top": 0.9})
    (ax,) = fig.axes
    assert ax.get_subplotspec().get_geometry() == (1, 1, 0, 0)  # one axes over the whole figure
    # two modes per stage: width 0.4, bars at stage -+ 0.2, each 0.4 x 0.92 wide
    rects = ax.patches
    assert len(rects) == 5 * 4
    centres = [r.get_x() + r.get_width() / 2 for r in rects[:4]]
    assert centres == pytest.approx([-0.2, 0.2, 0.8, 1.2]) and rects[0].get_width() == pytest.approx(0.368)
    for k in range(len(parts)):  # segment k of each bar: (k+1) GiB (x2 under full), on top of the ones below
        scale = [1, 2, 1, 2]
        assert [r.get_height() for r in rects[4 * k:4 * k + 4]] == pytest.approx([(k + 1) * s for s in scale])
        assert [r.get_y() for r in rects[4 * k:4 * k + 4]] == pytest.approx([k * (k + 1) / 2 * s for s in scale])
        assert matplotlib.colors.to_hex(rects[4 * k].get_facecolor()) == matplotlib.colors.to_hex(
            ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")[k])
    (usable,) = ax.get_lines()
    assert list(usable.get_ydata()) == [70, 70]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["none", "full", "none", "full"]
    assert [(t.get_text(), t.get_position()[0]) for t in ax.texts] == [("ZeRO-0", 0), ("ZeRO-3", 1)]
    assert ax.get_ylabel() == "per-GPU memory (GiB)"
    assert _legend_texts(ax) == ["usable GPU memory", *parts]


def test_report_inference_memory_plots_weights_by_dtype_and_kv_against_context(figures):
    data = {"dtypes": {"bf16": 16 * GiB, "int4": 4 * GiB}, "usable_bytes": 75 * GiB,
            "contexts": {"1024": 0.5 * GiB, "4096": 2 * GiB, "16384": 8 * GiB}}
    fig = _draw(figures, "inference_memory", data)
    assert tuple(fig.get_size_inches()) == (12, 4.6)
    assert _margins(fig) == pytest.approx({"left": 0.07, "right": 0.97, "bottom": 0.13, "top": 0.86})
    left, right = fig.axes
    assert [p.get_height() for p in left.patches] == [16, 4]
    assert [t.get_text() for t in left.get_xticklabels()] == ["bf16", "int4"]
    assert list(left.get_lines()[0].get_ydata()) == [75, 75]
    assert left.get_ylabel() == "weights per GPU (GiB)" and left.get_xlabel() == "weights dtype"
    (kv,) = right.get_lines()
    assert list(kv.get_xdata()) == [1024, 4096, 16384] and list(kv.get_ydata()) == [0.5, 2, 8]
    assert right.get_xscale() == right.get_yscale() == "log" and right.xaxis.get_transform().base == 2
    assert right.get_xlabel() == "context (tokens)" and right.get_ylabel() == "KV cache of one sequence (GiB)"
    assert (left.get_title(), right.get_title()) == ("weights by dtype", "KV cache vs context")


def _curve_points(bounds, base):
    return [{"batch": b, "tokens_per_s": base * b, "predicted_s": 0.001 * b, "bound": bound}
            for b, bound in zip((1, 2, 4, 8), bounds)]


def test_report_roofline_curves_mark_the_first_compute_bound_batch(figures):
    data = {"prefill": _curve_points(("memory", "compute", "compute", "compute"), 100.0),
            "decode": _curve_points(("memory",) * 4, 3.0)}
    fig = _draw(figures, "roofline_curves", data)
    assert tuple(fig.get_size_inches()) == (13, 4.6)
    assert _margins(fig) == pytest.approx({"left": 0.07, "right": 0.93, "bottom": 0.13, "top": 0.86})
    prefill, decode, prefill_twin, decode_twin = fig.axes
    rate, mark = prefill.get_lines()
    assert list(rate.get_xdata()) == [1, 2, 4, 8] and list(rate.get_ydata()) == [100, 200, 400, 800]
    assert list(mark.get_xdata()) == [2, 2]
    assert prefill.get_title() == "prefill: compute-bound from batch 2"
    assert decode.get_title() == "decode: memory-bound at every batch" and len(decode.get_lines()) == 1
    assert list(prefill_twin.get_lines()[0].get_ydata()) == pytest.approx([1, 2, 4, 8])  # ms
    assert prefill_twin.get_ylabel() == "time to first token (ms) (dashed)"
    assert decode_twin.get_ylabel() == "time per output token (ms) (dashed)" and decode_twin.get_ylim()[0] == 0
    assert prefill.get_ylabel() == "tokens/s (solid)" and prefill.get_xlabel() == "batch (sequences)"
    assert prefill.xaxis.get_transform().base == 2
    # tokens/s spanning 8x: linear from 0; a decade or more: log
    assert prefill.get_yscale() == "linear" and prefill.get_ylim()[0] == 0


@pytest.mark.parametrize("values,scale", [([1.0, 10.0], "log"), ([1.0, 9.99], "linear"), ([0.0, 100.0], "linear")])
def test_report_y_scale_is_log_from_one_decade(values, scale):
    import matplotlib.pyplot as plt

    from mlsyscalc.report.model_report_figures import _y_scale

    fig, ax = plt.subplots()
    try:
        ax.plot([1, 2], values)
        _y_scale(ax, values)
        assert ax.get_yscale() == scale
        if scale == "linear":
            assert ax.get_ylim()[0] == 0
    finally:
        plt.close(fig)


def test_report_op_share_bars_each_kernel_in_percent(figures):
    data = {"prefill": [("matmul", 0.6), ("attention", 0.3), ("norm", 0.1)], "decode": [("matmul", 0.9)]}
    fig = _draw(figures, "op_share", data)
    assert tuple(fig.get_size_inches()) == (12, 4.6)
    assert _margins(fig) == pytest.approx({"left": 0.1, "right": 0.97, "bottom": 0.13, "top": 0.86})
    prefill, decode = fig.axes
    assert [p.get_width() for p in prefill.patches] == pytest.approx([10, 30, 60])  # largest on top
    assert [t.get_text() for t in prefill.get_yticklabels()] == ["norm", "attention", "matmul"]
    assert [p.get_width() for p in decode.patches] == pytest.approx([90])
    assert (prefill.get_title(), decode.get_title()) == ("prefill", "decode")
    assert prefill.get_xlabel() == "share of the step (%)"


def test_report_serving_latency_plots_p50_and_p99_in_ms(figures):
    points = [{f"{k}_{q}_s": v * (1 if q == "p50" else 3) * (i + 1) for k, v in (("ttft", 0.1), ("tpot", 0.01),
                                                                                ("e2e", 2.0)) for q in ("p50", "p99")}
              for i in range(2)]
    points[1]["e2e_p99_s"] = None  # a missing value drops its whole curve
    fig = _draw(figures, "serving_latency", {"rates": [0.5, 1.0], "points": points})
    assert tuple(fig.get_size_inches()) == (9, 4.6)
    assert _margins(fig) == pytest.approx({"left": 0.1, "right": 0.97, "bottom": 0.13, "top": 0.88})
    (ax,) = fig.axes
    assert ax.get_subplotspec().get_geometry() == (1, 1, 0, 0)
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines()}
    assert lines == {"TTFT p50": pytest.approx([100, 200]), "TTFT p99": pytest.approx([300, 600]),
                     "TPOT p50": pytest.approx([10, 20]), "TPOT p99": pytest.approx([30, 60]),
                     "end to end p50": pytest.approx([2000, 4000])}
    assert all(list(ln.get_xdata()) == [0.5, 1.0] for ln in ax.get_lines())
    assert [ln.get_linestyle() for ln in ax.get_lines()] == ["-", "--", "-", "--", "-"]
    assert ax.get_ylabel() == "latency (ms)" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "request rate (requests/s)"


def test_report_frontier_puts_the_report_law_first(figures):
    from mlsyscalc.calc.scaling.laws import LAW_NAMES

    fig = _draw(figures, "frontier", {"law": "epoch", "point": [1e23, 7e9, 1.4e11]})
    assert tuple(fig.get_size_inches()) == (9, 5.2)
    assert _margins(fig) == pytest.approx({"left": 0.1, "right": 0.97, "bottom": 0.11, "top": 0.88})
    (ax,) = fig.axes
    assert ax.get_subplotspec().get_geometry() == (1, 1, 0, 0)
    labels = [ln.get_label() for ln in ax.get_lines()]
    names = ["epoch", *[n for n in LAW_NAMES if n != "epoch"]]
    assert labels == [f"{n} {q}_opt" for n in names for q in ("N", "D")] + ["this point: N", "this point: D"]
    assert _points(ax.get_lines()[-2:]) == [1e23, 7e9, 1e23, 1.4e11]


# --- plotting: what every figure writer shares --------------------------------------------------------------------

def test_check_path_takes_known_suffixes_and_makes_the_folder(tmp_path):
    from mlsyscalc.errors import MlsysError
    from mlsyscalc.report.plotting import check_path

    assert check_path(tmp_path / "a" / "b" / "f.PNG") == tmp_path / "a" / "b" / "f.PNG"
    assert (tmp_path / "a" / "b").is_dir()
    with pytest.raises(MlsysError, match=r"--plot f\.pdf: use a \.png or \.svg file name"):
        check_path("f.pdf")
    with pytest.raises(MlsysError, match=r"--out x\.png: use a \.svg file name"):
        check_path("x.png", "--out", (".svg",))
    (tmp_path / "file").write_text("x")
    with pytest.raises(MlsysError, match="cannot create its folder"):
        check_path(tmp_path / "file" / "f.svg")


def test_save_writes_every_format_reproducibly_and_closes_the_figure(tmp_path):
    import matplotlib.pyplot as plt

    from mlsyscalc.report.plotting import pyplot, save

    pyplot()
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([1, 2], [3, 4])
    paths = save(fig, [tmp_path / "a.svg", str(tmp_path / "a.png")], dpi=50)
    assert paths == [tmp_path / "a.svg", tmp_path / "a.png"] and not plt.fignum_exists(fig.number)
    svg = (tmp_path / "a.svg").read_text()
    assert "<dc:date>" not in svg  # no creation date: a rerun writes the same file
    png = (tmp_path / "a.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    tight = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert tight != (100, 50)  # cropped to the drawing (bbox_inches="tight"), not the 2 x 1 inch canvas
    fig, _ = plt.subplots(figsize=(2, 1))
    save(fig, [tmp_path / "b.png"], dpi=50, tight=False)
    png = (tmp_path / "b.png").read_bytes()
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (100, 50)  # the whole figure
    from mlsyscalc.errors import MlsysError

    fig, _ = plt.subplots()
    with pytest.raises(MlsysError, match="cannot write figure"):
        save(fig, [tmp_path / "missing" / "c.png"])
    assert not plt.fignum_exists(fig.number)


def test_plain_ticks_print_numbers_without_mathtext():
    import matplotlib.pyplot as plt

    from mlsyscalc.report.plotting import plain_ticks

    fig, ax = plt.subplots()
    try:
        plain_ticks(ax.xaxis)
        major = ax.xaxis.get_major_formatter()
        assert [major(v, 0) for v in (1, 16, 0.5, 1e20, 2.5e-7)] == ["1", "16", "0.5", "1e20", "2.5e-07"]
        assert ax.xaxis.get_minor_formatter()(3, 0) == ""
    finally:
        plt.close(fig)
