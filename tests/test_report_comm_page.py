"""The NCCL page (mlsyscalc/report/comm.py) part by part on rows written by hand: which rows each fit and each
error band takes, the fallback fit, the fitted model's table, the observed floors and busbw, every size's row,
the measured spec's name and the busbw figure's series. Expected values come from the rows by hand or from
`collective_cost`, the model the page reports on."""

from __future__ import annotations

import json
import statistics

import pytest

from mlsyscalc.calc.comm.collectives import collective_cost, ring_terms
from mlsyscalc.report import comm as comm_report
from mlsyscalc.specs.cluster import ClusterSpec, Link, LinkTerms, Protocol, cluster_from_dict

KiB, MiB = 2**10, 2**20
ENV = {"gpu": "NVIDIA H100 80GB HBM3", "nccl": "2.x", "torch": "t", "cuda": "c", "git_commit": "abc",
       "world_size": 2, "backend": "nccl"}


def _row(size, time_s, collective="all-reduce", gpus=2, **extra):
    busbw = size / time_s / 1e9 if time_s else None
    return {"collective": collective, "size_bytes": size, "gpus": gpus, "nodes": 1, "backend": "nccl", "ok": True,
            "time_s": time_s, "algbw_GBps": busbw, "busbw_GBps": busbw, "trials": 5, "measured_at": "now",
            "env": ENV, **extra}


def _line(bandwidth_GBps=100.0, latency_us=5.0):
    return cluster_from_dict({"name": "line", "gpus_per_node": 8,
                              "intra_node": {"bandwidth_GBps": bandwidth_GBps, "latency_us": latency_us}}, "test")


def test_timed_rows_are_the_correct_single_node_ones_within_the_sizes():
    rows = [_row(MiB - 1, 1e-5), _row(MiB, 1e-5), _row(4 * MiB, 1e-5), _row(8 * MiB, 1e-5),
            _row(2 * MiB, 1e-5, ok=False), _row(2 * MiB, 0.0), _row(2 * MiB, 1e-5, nodes=2)]
    assert [r["size_bytes"] for r in comm_report._timed(rows, MiB)] == [MiB, 4 * MiB, 8 * MiB]
    assert [r["size_bytes"] for r in comm_report._timed(rows, MiB, 4 * MiB)] == [MiB, 4 * MiB]  # both ends kept


def test_alpha_beta_fit_of_exact_rows_and_its_errors():
    alpha, bandwidth = 7e-6, 150e9
    rows = []
    for size in (MiB, 4 * MiB, 16 * MiB):
        steps, sent = ring_terms("all-gather", 4, size)
        rows.append(_row(size, steps * alpha + sent / bandwidth, "all-gather", 4))
    fit = comm_report.fit_alpha_beta(rows, "all-gather")
    assert fit.collective == "all-gather" and fit.rows == 3
    assert fit.latency_s == pytest.approx(alpha, rel=1e-9) and fit.bandwidth_Bps == pytest.approx(bandwidth, rel=1e-9)
    assert fit.median_abs_error < 1e-12 and fit.max_abs_error < 1e-12
    with pytest.raises(Exception, match="all-gather: need at least 2 timed rows"):
        comm_report.fit_alpha_beta(rows[:1], "all-gather")


def test_a_fit_with_negative_latency_falls_back_to_bandwidth_alone():
    """t = bytes / 100 GB/s - 3 us per step pulls alpha below zero: alpha is then 0 and 1/B the weighted least
    squares slope of t = bytes x beta with weights 1/t: beta = sum(b/t) / sum((b/t)^2)."""
    rows = []
    for size in (MiB, 2 * MiB, 8 * MiB):
        steps, sent = ring_terms("all-reduce", 2, size)
        rows.append(_row(size, sent / 100e9 - 3e-6 * steps))
    ratios = [ring_terms("all-reduce", 2, r["size_bytes"])[1] / r["time_s"] for r in rows]
    beta = sum(ratios) / sum(x * x for x in ratios)
    errors = sorted(abs(beta * x - 1) for x in ratios)
    fit = comm_report.fit_alpha_beta(rows)
    assert fit.collective == "all" and fit.latency_s == 0.0
    assert fit.bandwidth_Bps == pytest.approx(1 / beta, rel=1e-12)
    assert fit.median_abs_error == pytest.approx(errors[1]) and fit.max_abs_error == pytest.approx(errors[2])
    assert fit.max_abs_error > 0.01  # the line misses: these rows are not on one


def test_fit_all_fits_each_collective_with_two_rows_or_more():
    rows = [_row(MiB, 2e-5), _row(4 * MiB, 5e-5), _row(16 * MiB, 2e-4),
            _row(MiB, 3e-5, "broadcast"), _row(2 * MiB, 4e-5, "all-gather"), _row(512 * KiB, 1e-5, "all-gather")]
    joint, per = comm_report.fit_all(rows, MiB)
    assert joint.rows == 5 and set(per) == {"all-reduce"} and per["all-reduce"].rows == 3
    with pytest.raises(Exception, match="no correct timed single-node rows of 64 MiB or more to fit"):
        comm_report.fit_all(rows, 64 * MiB)


def _measured():
    terms = LinkTerms(200e9, 5e-6, protocols=(Protocol("LL", 20e9, 1e-6), Protocol("Simple", 300e9, 4e-6, 2e-6)),
                      call_overhead_s=15e-6)
    link = Link("measured", 180e9, 6e-6, {"all-reduce": terms, "broadcast": LinkTerms(90e9, 2.5e-6)})
    return ClusterSpec("h100-x2-measured", "H100", 2, link, None, measured=True)


def test_model_section_lists_each_protocol_under_its_collective():
    lines = comm_report._model_section(_measured(), MiB)
    assert "single alpha-beta line (weighted least squares over sizes >= 1 MiB)" in lines[2]
    assert "`model_specs/clusters/h100-x2-measured.json`" in lines[2] and "2 protocols at most" in lines[2]
    table = lines[4:]
    assert table[0] == ("| collective | H (us) | protocol | base_p (us per call) | alpha_p (us per step) | B_p (GB/s) | "
                        "single line: alpha (us) | B (GB/s) |")
    assert table[2:] == ["| all-reduce | 15.0 | LL | 0.0 | 1.0 | 20.0 | 5.0 | 200.0 |",
                         "|  |  | Simple | 2.0 | 4.0 | 300.0 |  |  |"]  # broadcast has no protocols: no row


def test_error_bands_take_their_rows_and_the_held_out_column_its_own():
    """Rows priced by one spec with errors of 50% (512 KiB, under min_size), 1%, 3% (4 MiB), 10% (16 MiB, the
    band boundary: upper band only) and 20% (64 MiB); the held-out fit sees 4 MiB and 64 MiB."""
    spec = _line()
    errors = {512 * KiB: 0.5, MiB: 0.01, 4 * MiB: 0.03, 16 * MiB: 0.10, 64 * MiB: 0.20}
    rows = [_row(s, collective_cost("all-reduce", s, 2, spec).time_s / (1 + e)) for s, e in errors.items()]
    held = [r for r in rows if r["size_bytes"] in (4 * MiB, 64 * MiB)]
    specs = {"datasheet": spec, "line": spec, "measured": spec, "held out": spec}
    lines = comm_report._error_section(rows, specs, held, MiB)
    heads = [line for line in lines if line.startswith("### ")]
    assert heads == ["### |predicted - measured| / measured, sizes >= 1 MiB, median / max",
                     "### |predicted - measured| / measured, sizes 1 MiB .. < 16 MiB, median / max",
                     "### |predicted - measured| / measured, sizes >= 16 MiB, median / max"]
    body = [line for line in lines if line.startswith("| all-reduce")]
    assert body == ["| all-reduce | 6.5% / 20.0% | 6.5% / 20.0% | 6.5% / 20.0% | 11.5% / 20.0% | 2 |",
                    "| all-reduce | 2.0% / 3.0% | 2.0% / 3.0% | 2.0% / 3.0% | 3.0% / 3.0% | 1 |",
                    "| all-reduce | 15.0% / 20.0% | 15.0% / 20.0% | 15.0% / 20.0% | 20.0% / 20.0% | 1 |"]
    assert comm_report.BAND_SPLIT == 16 * MiB
    # a collective the held-out rows lack shows '-' and 0 rows
    rows.append(_row(2 * MiB, collective_cost("broadcast", 2 * MiB, 2, spec).time_s / 1.04, "broadcast"))
    lines = comm_report._error_section(rows, specs, held, MiB)
    assert "| broadcast | 4.0% / 4.0% | 4.0% / 4.0% | 4.0% / 4.0% | - | 0 |" in lines


def test_error_table_per_collective_median_max_and_count():
    spec = _line()
    rows = [_row(s, collective_cost("all-reduce", s, 2, spec).time_s / (1 + e))
            for s, e in ((MiB, 0.02), (2 * MiB, 0.04), (4 * MiB, 0.12))]
    table = comm_report.error_table(rows, spec, MiB, 2 * MiB)
    assert set(table) == {"all-reduce"} and table["all-reduce"]["rows"] == 2
    assert table["all-reduce"]["median_abs_error"] == pytest.approx(0.03)
    assert table["all-reduce"]["max_abs_error"] == pytest.approx(0.04)


def test_observed_floor_largest_size_and_share_of_the_datasheet_link():
    timed = [_row(64 * KiB, 10e-6), _row(256 * KiB, 12.5e-6), _row(256 * KiB + 1, 13e-6), _row(2**30, 2**30 / 296e9),
             _row(MiB, 30e-6, "broadcast")]
    lines = comm_report._observations(timed, "hgx-h100")  # 370 GB/s per direction (model_specs/clusters)
    assert lines[:3] == ["", "## Observed", ""]
    assert lines[3] == ("| collective | time per call, sizes <= 256 KiB (us) | largest size | busbw there (GB/s) "
                        "| share of datasheet link |")
    assert lines[5:7] == ["| all-reduce | 10.0 .. 12.5 | 1 GiB | 296.0 | 80% |",
                          "| broadcast | - | 1 MiB | 35.0 | 9% |"]  # 1 MiB / 30 us = 34.95 GB/s


def test_every_size_row_with_errors_regime_and_held_out_mark():
    line = _line(100.0, 5.0)
    measured = _measured()
    small, big = _row(8 * KiB, 20e-6), _row(2**30, 6e-3)
    lines = comm_report._size_table([small, big], "hgx-h100", line, measured, {("all-reduce", 2**30, 2)})
    assert lines[1] == "![busbw against size](busbw.png)" and lines[3] == "## Every size"
    body = [x for x in lines if x.startswith("| all-reduce")]

    def err(cost, t):
        return f"{100 * (cost.time_s - t) / t:+.1f}%"

    expected = []
    for r, regime, held in ((small, "host", ""), (big, "Simple", "yes")):
        size, t = r["size_bytes"], r["time_s"]
        data, one, fitted = (collective_cost("all-reduce", size, 2, s) for s in ("hgx-h100", line, measured))
        expected.append(f"| all-reduce | {'8 KiB' if size < MiB else '1 GiB'} | {t * 1e6:.1f} | "
                        f"{size / t / 1e9:.2f} | {size / t / 1e9:.2f} | {data.busbw_Bps / 1e9:.1f} | {err(data, t)} | "
                        f"{err(one, t)} | {fitted.time_s * 1e6:.1f} | {err(fitted, t)} | {regime} | {held} |")
    assert body == expected
    # H = 15 us floors the small call (LL: 2 steps x 1 us + 8 KiB / 20 GB/s = 2.4 us); Simple wins at 1 GiB
    assert f"| {collective_cost('all-reduce', 8 * KiB, 2, measured).time_s * 1e6:.1f} |" == "| 15.0 |"
    assert lines[-1].startswith("Errors are (predicted - measured) / measured: negative means")


def test_the_measured_spec_is_named_after_the_card_and_gpus(tmp_path, monkeypatch):
    seen = {}

    def fake_write_report(rows, folder, min_size, datasheet, measured, command):
        seen.update(name=measured.name, datasheet=datasheet, min_size=min_size, command=command)
        return folder / "README.md"

    monkeypatch.setattr(comm_report, "write_report", fake_write_report)
    spec = _line(120.0, 4.0)
    rows = []
    for c in ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce", "all-to-all", "p2p"):
        for size in (MiB, 4 * MiB, 16 * MiB, 64 * MiB):
            rows.append(_row(size, collective_cost(c, size, 2, spec).time_s, c))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    comm_report.write(tmp_path, "mlsys bench report x")
    assert seen["name"] == "h100-x2-measured"  # the card, not its memory (HBM3)
    assert seen["min_size"] == MiB and seen["command"] == "mlsys bench report x"



@pytest.mark.parametrize("device,card", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                         ("NVIDIA A100-SXM4-80GB", "a100"), ("AMD Instinct MI300X", "mi300x"),
                                         ("NVIDIA H100 PCIe", "h100"), ("", "gpu"), (None, "gpu"), ("cpu", "gpu")])
def test_card_name_is_the_model_word_of_the_device(device, card):
    assert comm_report.card_name(device) == card


def test_busbw_figure_plots_measured_points_and_each_model(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, dpi=None: kept.append((fig, path, dpi)))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    spec, other = _line(100.0, 5.0), _line(50.0, 1.0)
    rows = [_row(s, collective_cost(c, s, 2, spec).time_s * 1.1, c) for c in ("all-reduce", "all-gather",
                                                                               "broadcast", "reduce", "p2p")
            for s in (MiB, 8 * MiB)]
    rows.append(_row(MiB, None, "all-to-all"))  # untimed: no panel
    comm_report.plot(rows, {"model: a": spec, "model: b": other}, tmp_path / "busbw.png")
    (fig, path, dpi), = kept
    try:
        assert path == tmp_path / "busbw.png" and dpi == 110
        assert tuple(fig.get_size_inches()) == pytest.approx((16.8, 6.8))  # 5 panels: 2 rows of 4
        axes = fig.axes
        assert [ax.get_title() for ax in axes[:5]] == ["all-reduce", "all-gather", "broadcast", "reduce", "p2p"]
        assert [ax.axison for ax in axes] == [True] * 5 + [False] * 3
        first = axes[0]
        measured, a, b = first.get_lines()
        assert list(measured.get_xdata()) == [MiB, 8 * MiB]
        assert list(measured.get_ydata()) == pytest.approx([r["busbw_GBps"] for r in rows[:2]])
        assert list(a.get_ydata()) == pytest.approx([collective_cost("all-reduce", s, 2, spec).busbw_Bps / 1e9
                                                     for s in (MiB, 8 * MiB)])
        assert list(b.get_ydata()) == pytest.approx([collective_cost("all-reduce", s, 2, other).busbw_Bps / 1e9
                                                     for s in (MiB, 8 * MiB)])
        assert (a.get_linestyle(), b.get_linestyle()) == ("--", "-")
        assert [t.get_text() for t in first.get_legend().get_texts()] == ["measured (NCCL)", "model: a", "model: b"]
        assert first.get_xscale() == "log" and first.xaxis.get_transform().base == 2
        assert first.get_xlabel() == "size (bytes)" and first.get_ylabel() == "busbw (GB/s)"
        assert all(ax.get_legend() is None for ax in axes[1:5])
    finally:
        plt.close(fig)


def test_one_small_row_gives_its_own_floor():
    """A single small row gives 'x .. x' (min and max of one value), not a blank."""
    lines = comm_report._observations([_row(8 * KiB, 9e-6)], "hgx-h100")
    assert lines[5] == f"| all-reduce | 9.0 .. 9.0 | 8 KiB | {8 * KiB / 9e-6 / 1e9:.1f} | 0% |"


# --- comm_shared.py and comm_transfer.py: the shared-fit and transfer pages -------------------------------------

def test_shared_signed_errors_per_size_and_their_median_max():
    from mlsyscalc.report import comm_shared

    spec = _line()
    rows = [_row(s, collective_cost("all-reduce", s, 2, spec).time_s / (1 + e)) for s, e in
            ((512 * KiB, 0.5), (MiB, -0.02), (4 * MiB, 0.06))]
    rows += [_row(4 * MiB, 1.0, ok=False), _row(4 * MiB, 1.0, nodes=2, collective="broadcast")]
    errs = comm_shared.signed_errors(rows, spec, "time_s", MiB)
    assert list(errs) == [("all-reduce", 2)]
    assert errs[("all-reduce", 2)] == {MiB: pytest.approx(-0.02), 4 * MiB: pytest.approx(0.06)}
    assert comm_shared._stat(errs[("all-reduce", 2)]) == "4.0% / 6.0%" and comm_shared._stat(None) == "-"
    assert comm_shared.signed_errors(rows, spec, "graph_time_s", MiB) == {}  # rows without that timing


def test_shared_parameters_table_in_us_and_gbps():
    from mlsyscalc.bench.comm_shared_fit import GROUP_OF, SharedFit
    from mlsyscalc.report import comm_shared

    group = GROUP_OF["all-reduce"]
    fit = SharedFit(floor_s={"all-reduce": 12.34e-6, "broadcast": 5e-6},
                    bandwidth_Bps={group: 352.4e9, GROUP_OF["broadcast"]: 100.6e9}, buffer_Bps={group: 2000e9},
                    host_s={"all-reduce": 30e-6, "broadcast": 25.05e-6})
    assert comm_shared._params(fit) == [["all-reduce", group, "30.0", "12.3", "352", "2000"],
                                        ["broadcast", GROUP_OF["broadcast"], "25.1", "5.0", "101", "-"]]
    graph = SharedFit(floor_s={"all-reduce": 1e-5}, bandwidth_Bps={group: 1e11}, buffer_Bps={})
    assert comm_shared._params(graph)[0][2] == "-"  # no host floor in a device fit


def test_shared_spread_lines_count_irreproducible_and_host_bound_rows():
    from mlsyscalc.report import comm_shared

    rows = [_row(MiB, 10e-6, time_min_s=10e-6 / 1.1, host_issue_s=9.5e-6),  # spread 10%, host-bound
            _row(4 * MiB, 20e-6, time_min_s=20e-6 / 1.3, host_issue_s=1e-6, graph_time_s=15e-6,
                 graph_time_min_s=15e-6 / 1.05),  # 30%: past 1.2 x best
            _row(8 * MiB, 40e-6, time_min_s=40e-6 / 1.2, graph_time_s=30e-6),  # exactly 1.2: not counted; a graph
            # time without its best trial is no spread
            _row(512 * KiB, 5e-6, time_min_s=1e-6), _row(MiB, 20e-6, gpus=4, time_min_s=20e-6)]
    lines = comm_shared._spread_lines(rows, MiB)
    assert lines[0] == ("| GPUs | timing | rows | median > 1.2 x best | median spread | max spread | host-bound "
                        "(host_issue_s >= 0.9 time_s) |")
    assert lines[2:] == ["| 2 | eager | 3 | 1 | 20.0% | 30.0% | 1 |", "| 2 | CUDA graph | 1 | 0 | 5.0% | 5.0% | - |",
                         "| 4 | eager | 1 | 0 | 0.0% | 0.0% | 0 |"]


def test_transfer_page_marks_the_fitted_gpu_count_in_sample():
    from mlsyscalc.report import comm_transfer

    fitted, sheet = _line(100.0, 5.0), _line(50.0, 5.0)
    rows = []
    for gpus, e in ((2, 0.01), (4, 0.05)):
        for size in (MiB, 8 * MiB):
            t = collective_cost("all-gather", size, gpus, fitted).time_s / (1 + e * (size // MiB))
            rows.append(_row(size, t, "all-gather", gpus))
    rows.append(_row(512 * KiB, 1.0, "all-gather", 2))  # under min_size
    errors = comm_transfer.transfer_errors(rows, fitted, MiB)
    assert errors[("all-gather", 2)] == {"median_abs_error": pytest.approx(0.045), "max_abs_error": pytest.approx(0.08),
                                         "rows": 2}
    lines = comm_transfer.transfer_lines(rows, replace_name(fitted, "mine"), 2, sheet, MiB)
    assert lines[0] == "# Collectives: a calibration on one GPU count, checked on the others"
    assert lines[2].startswith("Spec `mine` fitted (protocol model, `mlsyscalc/bench/comm_fit.py`) on the 2-GPU rows only")
    assert "Rows: NVIDIA H100 80GB HBM3, NCCL 2.x, torch t, commit abc, NVLS off." in lines[2]
    assert lines[4] == "|predicted - measured| / measured, median / max, over sizes >= 1 MiB:"
    assert lines[6] == "| collective | GPUs | rows the fit | rows | fitted on 2 GPUs | datasheet `line` |"
    sheet_err = {g: [abs(collective_cost("all-gather", r["size_bytes"], g, sheet).time_s / r["time_s"] - 1)
                     for r in rows if r["gpus"] == g and r["size_bytes"] >= MiB] for g in (2, 4)}
    assert lines[8:10] == [
        f"| all-gather | 2 | in-sample | 2 | 4.5% / 8.0% | {100 * statistics.median(sheet_err[2]):.1f}% / "
        f"{100 * max(sheet_err[2]):.1f}% |",
        f"| all-gather | 4 | held out (other GPU count) | 2 | 22.5% / 40.0% | "
        f"{100 * statistics.median(sheet_err[4]):.1f}% / {100 * max(sheet_err[4]):.1f}% |"]


def replace_name(spec, name):
    from dataclasses import replace

    return replace(spec, name=name)


def test_rows_without_nodes_are_single_node_rows():
    """The rows reader lets `nodes` be left out (mlsyscalc/readers/records.py); the NCCL page, its fits and the
    transfer page read such a row as one node, as the shared fit does, instead of stopping on a KeyError."""
    from mlsyscalc.bench import comm_fit
    from mlsyscalc.report import comm_transfer

    spec = _line()
    rows = [_row(s, collective_cost("all-reduce", s, 2, spec).time_s) for s in (MiB, 4 * MiB, 16 * MiB)]
    for r in rows:
        del r["nodes"]
    assert len(comm_report._timed(rows, MiB)) == 3
    assert [r["size_bytes"] for r in comm_fit.by_collective(rows)["all-reduce"]] == [MiB, 4 * MiB, 16 * MiB]
    assert comm_transfer.transfer_errors(rows, spec, MiB)[("all-reduce", 2)]["rows"] == 3


def test_page_header_names_the_card_commit_measured_range_and_method(tmp_path, monkeypatch):
    from mlsyscalc.bench import comm_fit

    spec = _line()
    env = {**ENV, "hostname": "box", "nccl_nvls_enable": "0", "git_commit": "abc1234"}
    rows = [_row(s, collective_cost("all-reduce", s, 2, spec).time_s, env=env, trials=7, measured_at=f"t{k}")
            for k, s in enumerate((MiB, 4 * MiB, 16 * MiB))]
    rows[0]["trials"] = 5  # the first timed row's count is the one quoted
    monkeypatch.setattr(comm_report, "plot", lambda rows, clusters, path: None)
    monkeypatch.setattr(comm_report, "held_out_cluster", lambda rows, min_size, name: (spec, rows[1:2]))
    monkeypatch.setattr(comm_fit, "variant_errors", lambda rows, min_size: {
        "all-reduce": {v: (0.01 * (i + 1), 0.02 * (i + 1)) for i, v in enumerate(comm_fit.VARIANTS)}})
    text = comm_report.write_report(rows, tmp_path, MiB, "hgx-h100", _measured(), "mlsys bench report r").read_text()
    lines = text.splitlines()
    assert lines[0] == "# NCCL collectives on 2 x NVIDIA H100 80GB HBM3: measured vs the collective model"
    assert lines[2] == "Generated by `mlsys bench report r` from `rows.jsonl` (do not edit by hand)."
    assert lines[4] == ("- card: 2 x NVIDIA H100 80GB HBM3 on one host (box), NCCL 2.x, torch t, CUDA c, "
                        "NCCL_NVLS_ENABLE=0")
    assert lines[5] == "- commit: abc1234; measured t0 .. t2"
    assert lines[6].startswith("- method: float32 buffers, every result checked element by element on every rank "
                               "before timing; 5 trials of back-to-back calls timed with CUDA events after warm-up;")
    assert ("| collective | max, 1 protocol | max, 2 (the model) | max, 3 | sum, 2 protocols |" in lines)
    assert "| all-reduce | 1.0% / 2.0% | 2.0% / 4.0% | 3.0% / 6.0% | 4.0% / 8.0% |" in lines
    assert "### Choices: how H enters and how many protocols (max error, sizes >= 1 MiB, in-sample / held out)" in lines
    held = [line for line in lines if line.startswith("| all-reduce | 4 MiB |")]
    assert len(held) == 1 and held[0].endswith("| yes |")  # the held-out size is marked in the size table
    gloo = [{**r, "env": {**env, "backend": "gloo"}} for r in rows]
    text = comm_report.write_report(gloo, tmp_path, MiB, "hgx-h100", _measured(), "c").read_text()
    assert "5 trials of back-to-back calls timed with the wall clock after warm-up" in text
